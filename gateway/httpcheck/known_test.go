package httpcheck

// needsLinger is the reason of the cases where fasthttp closes a connection with the client's
// bytes unread, after the same answer net/http gives: the kernel then resets the connection,
// and the client can lose the answer. net/http half-closes and drains first (server.go
// closeWriteAndWait); the gateway on fasthttp is to do the same.
const needsLinger = "needs the lingering close (clientconn)"

// knownDifferences are the cases where the two servers differ, each with its reason. Those that
// are not needsLinger are fasthttp answering before any code of ours runs, its parser mostly as
// RFC 9112 asks (parserdiff REPORT.md, "What only a fasthttp change can make equal"): TestParity
// fails if one of them stops differing, so that this table, which docs/contract.md is to
// follow, stays true.
var knownDifferences = map[string]string{
	// RFC 9112 6.3: a request with both Content-Length and Transfer-Encoding is framed by its
	// chunks on both, but fasthttp then closes (MUST), so what follows the body is never served
	// as the next request; net/http serves it.
	"py/smuggled":              clTE,
	"go/CL+TE smuggle":         clTE,
	"framing/CL then TE":       clTE,
	"framing/TE then CL":       clTE,
	"framing/two CL same":      "two equal Content-Length lines: fasthttp 400, net/http takes the length (RFC 9110 8.6 allows both)",
	"te/in HTTP/1.0":           te10,
	"te/in HTTP/1.0 with CL":   te10,
	"chunk/size 16 hex digits": "a 16-hex-digit chunk size: fasthttp 400 at once, net/http waits for the data (408, or 413 when it comes)",
	// RFC 9110 6.5.1: fields that frame, route or authenticate the message must not be trailers.
	"chunk/trailer Content-Length":            badTrailer,
	"chunk/trailer Transfer-Encoding":         badTrailer,
	"chunk/trailer Host":                      badTrailer,
	"chunk/trailer Authorization":             badTrailer,
	"chunk/trailer X-Forwarded-For":           badTrailer,
	"syntax/leading CRLF before request line": leadingCRLF,
	"syntax/two leading CRLF":                 leadingCRLF,
	"target/asterisk GET":                     "GET *: fasthttp 400, net/http serves it (the gateway's path rule then answers 400)",
	"version/h2 preface":                      "PRI * HTTP/2.0: fasthttp 400, net/http serves it (the gateway's path rule then answers 400)",
	"host/empty":                              "an empty Host in HTTP/1.1: fasthttp 400 (it cannot tell it from a missing one), net/http accepts it",
	"version/HTTP/1.2":                        "HTTP/1.2 without Connection: keep-alive: fasthttp closes after one request, net/http keeps the connection open",
	"conn/nothing sent": "a connection that sends nothing within the read timeout: fasthttp 408, net/http closes without an answer " +
		"(fasthttp hands that timeout to the ErrorHandler as it hands one within the body, which is 408)",

	"py/ten_thousand_headers":              needsLinger,
	"size/header block 64 KiB + 4 KiB + 1": needsLinger,
	"size/header block 128 KiB":            needsLinger,
	"size/request line 70 KiB":             needsLinger,
	"size/header line 70 KiB":              needsLinger,
	"py/chunked_over_limit":                needsLinger,
	"go/chunked_over_limit":                needsLinger,
}

const (
	clTE        = "Content-Length with Transfer-Encoding: fasthttp closes after the answer (RFC 9112 6.3), net/http serves the next request"
	te10        = "Transfer-Encoding in HTTP/1.0: fasthttp 501 (RFC 9112 6.1: faulty framing), net/http ignores it and frames by Content-Length"
	badTrailer  = "a trailer field fasthttp forbids (header.go isBadTrailer: framing, routing, auth and hop-by-hop names): fasthttp 400, net/http hands it on"
	leadingCRLF = "empty lines before the request line: fasthttp skips them (RFC 9112 2.2), net/http 400"
)
