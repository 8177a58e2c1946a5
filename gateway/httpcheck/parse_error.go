package httpcheck

import (
	"errors"
	"net"

	"github.com/valyala/fasthttp"
)

// ParseError is net/http's answer to a request fasthttp's parser refused with err, for the
// server's ErrorHandler (with Configure's SecureErrorLogMessage, so that err is a sentinel).
// silent means net/http answers nothing: the ErrorHandler closes the connection
// (ctx.Conn().Close()) before fasthttp writes an answer of its own.
func ParseError(h *fasthttp.RequestHeader, err error) (status int, text string, silent bool) {
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return fasthttp.StatusRequestEntityTooLarge, "request body is larger than max_body_size", false
	case errors.As(err, &small):
		return fasthttp.StatusRequestHeaderFieldsTooLarge, "request headers are larger than max_header_bytes", false
	case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding):
		return fasthttp.StatusNotImplemented, refusedTransfer.Text, false
	case errors.As(err, &netErr) && netErr.Timeout():
		// fasthttp keeps the raw block only once the headers parsed: before that, the client
		// sent nothing or stopped within its headers, and net/http closes without a word.
		if len(h.RawHeaders()) == 0 {
			return 0, "", true
		}
		return fasthttp.StatusRequestTimeout, "request body did not arrive within body_timeout", false
	default:
		return fasthttp.StatusBadRequest, "malformed request", false
	}
}
