package httpcheck

// The byte sets of golang.org/x/net/http/httpguts, which net/http checks requests with
// (request_test.go compares them with httpguts byte by byte).
var (
	tokenBytes [256]bool // RFC 9110 tchar: httpguts.IsTokenRune
	hostBytes  [256]bool // httpguts.ValidHostHeader's validHostByte
)

func init() {
	for c := '0'; c <= '9'; c++ {
		tokenBytes[c], hostBytes[c] = true, true
	}
	for c := 'a'; c <= 'z'; c++ {
		tokenBytes[c], hostBytes[c] = true, true
		tokenBytes[c-'a'+'A'], hostBytes[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		tokenBytes[c] = true
	}
	for _, c := range "!$%&'()*+,-.:;=[]_~" {
		hostBytes[c] = true
	}
}

// validHost is httpguts.ValidHostHeader: lenient, only bytes that no host or port may hold are refused.
func validHost(host []byte) bool {
	for _, c := range host {
		if !hostBytes[c] {
			return false
		}
	}
	return true
}
