package core

// Outcome is how a request ended on its worker, as the caller saw it (contract: Worker
// failures). Only failures and successes move the circuit breaker; pushback and other answers
// count neither way.
type Outcome uint8

const (
	// OutcomeSuccess: the worker answered (a 2xx or 3xx, or any answer the caller took as good).
	OutcomeSuccess Outcome = iota
	// OutcomeFailure: the worker failed the request: connection refused or reset, no response
	// headers in time, or a 500, 502, 503 or 504.
	OutcomeFailure
	// OutcomePushback: the worker asked for the request to go elsewhere (429).
	OutcomePushback
	// OutcomeNeutral: an answer that says nothing of the worker's health (4xx: the request's
	// fault), or a request the client abandoned.
	OutcomeNeutral
	NumOutcomes
)

var outcomeNames = [NumOutcomes]string{
	OutcomeSuccess:  "success",
	OutcomeFailure:  "failure",
	OutcomePushback: "pushback",
	OutcomeNeutral:  "neutral",
}

func (o Outcome) String() string {
	if o < NumOutcomes {
		return outcomeNames[o]
	}
	return "unknown_outcome"
}

// OutcomeNames are the outcomes' names in the order of their codes.
func OutcomeNames() []string { return outcomeNames[:] }

// OutcomeOfStatus classifies a worker's HTTP status: 500, 502, 503 and 504 are failures, 429
// is pushback, other 4xx and 5xx say nothing of the worker, the rest are successes.
func OutcomeOfStatus(status int) Outcome {
	switch {
	case status == 500 || status == 502 || status == 503 || status == 504:
		return OutcomeFailure
	case status == 429:
		return OutcomePushback
	case status >= 400:
		return OutcomeNeutral
	default:
		return OutcomeSuccess
	}
}
