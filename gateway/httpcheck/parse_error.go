package httpcheck

import (
	"errors"
	"net"

	"github.com/valyala/fasthttp"
)

// ParseError is net/http's answer to a request fasthttp's server refused with err before its
// handler, for the server's ErrorHandler (with Configure's SecureErrorLogMessage, so that the
// parser's errors are its sentinels). silent means net/http answers nothing: the ErrorHandler
// closes the connection (ctx.Conn().Close()) before fasthttp writes an answer of its own.
//
// It takes no request header: fasthttp resets the request when its body fails, so the header
// handed to the ErrorHandler holds nothing then. For the same reason a connection that sent
// nothing within the read timeout gets 408 here, where net/http closes it without an answer:
// fasthttp hands that timeout over exactly as one within the body.
func ParseError(err error) (status int, text string, silent bool) {
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
		// fasthttp wraps a timeout within the headers ("error when reading request headers"),
		// which net/http answers with a close; within the body it is the read's own error.
		if _, read := err.(net.Error); !read {
			return 0, "", true
		}
		return fasthttp.StatusRequestTimeout, "request body did not arrive within body_timeout", false
	default:
		return fasthttp.StatusBadRequest, "malformed request", false
	}
}
