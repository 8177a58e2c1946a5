package httpcheck

// The parity test's corpus: parserdiff's 238 hostile requests and 2 more trailers (branch parserdiff,
// scripts/parserdiff/corpus.go), from tests/python/test_http_adversarial.py ("py/"), the
// gateway's Go tests ("go/") and the classic framing, syntax and smuggling cases ("classic").

import (
	"fmt"
	"strings"
)

// next is a second request pipelined after a case's first, so that a different framing of the
// first shows as another number of requests, or another body.
const next = "GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"

func one(name, source, raw string) wireCase {
	return wireCase{Name: name, Source: source, Parts: [][]byte{[]byte(raw)}}
}

func parts(name, source string, closeAfter bool, raw ...string) wireCase {
	c := wireCase{Name: name, Source: source, CloseAfter: closeAfter}
	for _, r := range raw {
		c.Parts = append(c.Parts, []byte(r))
	}
	return c
}

// pyRequest builds a request as tests/python/edge_support.py's http_request does.
func pyRequest(method, target string, headers [][2]string, body string) string {
	lines := []string{method + " " + target + " HTTP/1.1", "Host: edge", "Connection: close"}
	for _, h := range headers {
		lines = append(lines, h[0]+": "+h[1])
	}
	if body != "" || method == "POST" || method == "PUT" {
		lines = append(lines, fmt.Sprintf("Content-Length: %d", len(body)))
	}
	return strings.Join(lines, "\r\n") + "\r\n\r\n" + body
}

var toWorker0 = [][2]string{{"X-SMG-Target-Worker", "0"}}

func pythonCases() []wireCase {
	const src = "test_http_adversarial.py"
	cs := []wireCase{
		one("py/set_cookie", src, pyRequest("GET", "/v1/_set_cookie", toWorker0, "")),
		one("py/own_headers", src, pyRequest("POST", "/v1/chat", [][2]string{{"X-SMG-Target-Worker", "0"}, {"Authorization", "Bearer t0"},
			{"X-Trace", "a"}, {"X-Trace", "b"}, {"Accept", "*/*"}}, `{"x": 1}`)),
		one("py/hop_by_hop", src, pyRequest("GET", "/v1/_hop", [][2]string{{"Connection", "X-Client-Hop, close"}, {"X-Client-Hop", "secret"},
			{"Keep-Alive", "timeout=5"}, {"TE", "trailers"}, {"Proxy-Authorization", "Basic eA=="}, {"Proxy-Connection", "keep-alive"}, {"X-Kept", "yes"}}, "")),
	}
	for _, t := range []string{"/v1/..%2Fadmin", "/v1/%2E%2E%2Fadmin", "/v1/x/..%2F..%2Fadmin", "/v1/%2e%2e/admin", "/v1/.%2e/admin", "/v1/x/%2E/y", "/v1/a%00b", "/v1/a%zzb"} {
		cs = append(cs, one("py/escaping "+t, src, pyRequest("GET", t, nil, "")))
	}
	for _, t := range []string{"/v1/completions%3Fx=1?y=%2F&z=%23w", "/v1/a%2Fb/%7Euser/%41?q=%3F%26&q=2", "/v1/x;p=1/y", "/v1/%20?a=%20+b"} {
		cs = append(cs, one("py/raw_target "+t, src, pyRequest("GET", t, [][2]string{{"X-SMG-Target-Worker", "1"}}, "")))
	}
	chunk := fmt.Sprintf("%x\r\n%s\r\n", 16384, strings.Repeat("y", 16384))
	many := make([][2]string, 10000)
	for i := range many {
		many[i] = [2]string{fmt.Sprintf("X-H%d", i), "v"}
	}
	return append(cs,
		one("py/declared_over_limit", src, "POST /v1/big HTTP/1.1\r\nHost: e\r\nContent-Length: 52428800\r\n\r\n"+strings.Repeat("x", 1000)),
		// the test's limit is 64 KiB and it sends twice that; with the gateway's 4 MiB, twice 4 MiB
		one("py/chunked_over_limit", src, "POST /v1/big HTTP/1.1\r\nHost: e\r\nTransfer-Encoding: chunked\r\n\r\n"+strings.Repeat(chunk, 2*maxBodySize/16384)),
		parts("py/body_still_arriving", src, false, "POST /v1/slow HTTP/1.1\r\nHost: e\r\nX-SMG-Routing-Key: k\r\nContent-Length: 18\r\n\r\n{\"pro", "mpt\": \"slow\"}"),
		one("py/body_never_finishes", src, "POST /v1/slow HTTP/1.1\r\nHost: e\r\nContent-Length: 100\r\n\r\npartial"),
		parts("py/client_leaves_during_upload", src, true, "POST /v1/gone HTTP/1.1\r\nHost: e\r\nContent-Length: 1000\r\n\r\n0123456789"),
		one("py/ten_thousand_headers", src, pyRequest("GET", "/v1/many", many, "")),
		one("py/hang_post", src, pyRequest("POST", "/v1/_hang", toWorker0, "{}")),
		one("py/stream_get", src, pyRequest("GET", "/v1/_stream", [][2]string{{"X-SMG-Target-Worker", "1"}}, "")),
		one("py/head", src, pyRequest("HEAD", "/v1/h", toWorker0, "")),
		one("py/smuggled", src, "POST /v1/front HTTP/1.1\r\nHost: e\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/admin HTTP/1.1\r\nHost: e\r\n\r\n"),
	)
}

func goCases() []wireCase {
	const gw, fw = "gateway_test.go", "forward_test.go"
	cs := []wireCase{
		one("go/disconnect_waiting_post", gw, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
		one("go/stream_get", gw, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"),
		one("go/http10_get", fw, "GET /v1/models HTTP/1.0\r\nHost: x\r\n\r\n"),
	}
	for _, t := range []string{"http://evil.example/v1/x", "*", "/v1/..%2Fadmin", "/v1/%2E%2E%2Fadmin", "/v1/x/..%2F..%2Fadmin",
		"/v1/%2e%2e/admin", "/v1/../admin", "/v1/./x", "/a%00b", "/a/%zz", "/a%2"} {
		method := "GET"
		if t == "*" {
			method = "OPTIONS"
		}
		cs = append(cs, one("go/bad_path "+method+" "+t, gw, method+" "+t+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	}
	for _, t := range []string{"/v1/a%2Fb?x=%3F&y", "/v1/completions%3Fx=1", "/v1/a%23y", "/v1/%7e%7E?", "/v1/a;b=c?q=a;b&&=", "/v1/%C3%A9?%zz"} {
		cs = append(cs, one("go/raw_target "+t, gw, "GET "+t+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	}
	var b strings.Builder
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "X-H%d: v\r\n", i)
	}
	// TestBodyLimit's cases, scaled from its 1000-byte limit to the gateway's default
	half := strings.Repeat("x", maxBodySize*6/10)
	hx := fmt.Sprintf("%x", len(half))
	cs = append(cs,
		one("go/hop_by_hop", gw, "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Private\r\nX-Private: 1\r\n"+
			"Keep-Alive: timeout=5\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nTe: gzip\r\nTrailer: X-T\r\nX-Normal: 1\r\n\r\n"),
		one("go/client_host", gw, "GET / HTTP/1.1\r\nHost: client.example\r\nConnection: close\r\n\r\n"),
		one("go/forwarded_for", gw, "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.1.2.3\r\nForwarded: for=10.1.2.3\r\nConnection: close\r\n\r\n"),
		one("go/declared_over_limit", gw, fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", maxBodySize+1)),
		one("go/chunked_over_limit", gw, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+hx+"\r\n"+half+"\r\n"+hx+"\r\n"+half+"\r\n0\r\n\r\n"),
		one("go/chunked_within_limit", gw, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+hx+"\r\n"+half+"\r\n0\r\n\r\n"),
		one("go/at_the_limit", gw, fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", maxBodySize)+strings.Repeat("y", maxBodySize)),
		parts("go/slow_body", gw, false, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234", "56789"),
		one("go/body_timeout", gw, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01"),
		one("go/big_header_8000", gw, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 8000)+"\r\n\r\n"),
		one("go/head_close", gw, "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
		one("go/ambiguous two CL", gw, "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
		one("go/ambiguous gzip,chunked", gw, "POST /v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
		one("go/ambiguous CL -1", gw, "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"),
		one("go/ambiguous CL '5 5'", gw, "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5 5\r\n\r\nhello"),
		one("go/CL+TE smuggle", gw, "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"),
		parts("go/chunked_cut_by_client", gw, true, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+"3\r\nabc\r\n"+
			strings.Repeat("1000\r\n"+strings.Repeat("z", 4096)+"\r\n", 3)+"10\r\nshort"),
		one("go/5000_headers", gw, "GET / HTTP/1.1\r\nHost: x\r\n"+b.String()+"Connection: close\r\n\r\n"),
		one("go/slow_headers", gw, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "),
	)
	return cs
}

// post is a POST of /v1/x with the given header lines and body, then the pipelined next.
func post(name, headers, body string) wireCase {
	return one(name, "classic", "POST /v1/x HTTP/1.1\r\nHost: x\r\n"+headers+"\r\n"+body+next)
}

func chunkedPost(name, body string) wireCase {
	return post("chunk/"+name, "Transfer-Encoding: chunked\r\n", body)
}

func get(name, raw string) wireCase { return one(name, "classic", raw+next) }

// headerOfSize is a GET whose whole header block (request line to the empty line) is n bytes.
func headerOfSize(n int) string {
	start, end := "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: ", "\r\n\r\n"
	return start + strings.Repeat("p", n-len(start)-len(end)) + end
}

func classicCases() []wireCase {
	long := strings.Repeat("a", 70<<10)
	return []wireCase{
		// Content-Length and Transfer-Encoding
		post("framing/CL then TE", "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("framing/TE then CL", "Transfer-Encoding: chunked\r\nContent-Length: 6\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("framing/two CL same", "Content-Length: 5\r\nContent-Length: 5\r\n", "hello"),
		post("framing/two CL different", "Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"),
		post("framing/CL +5", "Content-Length: +5\r\n", "hello"),
		post("framing/CL -5", "Content-Length: -5\r\n", "hello"),
		post("framing/CL 005", "Content-Length: 005\r\n", "hello"),
		post("framing/CL '  5' (extra OWS)", "Content-Length:   5\r\n", "hello"),
		post("framing/CL '5 ' (trailing OWS)", "Content-Length: 5 \r\n", "hello"),
		post("framing/CL '5\\t'", "Content-Length: 5\t\r\n", "hello"),
		post("framing/CL '5, 5' list", "Content-Length: 5, 5\r\n", "hello"),
		post("framing/CL '5,6' list", "Content-Length: 5,6\r\n", "hello!"),
		post("framing/CL 0x5", "Content-Length: 0x5\r\n", "hello"),
		post("framing/CL empty", "Content-Length: \r\n", ""),
		post("framing/CL overflow", "Content-Length: 99999999999999999999\r\n", "hello"),
		post("framing/CL 5 with 3 bytes more", "Content-Length: 5\r\n", "helloabc"),
		get("framing/GET with CL body", "GET /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"),
		get("framing/GET with chunked body", "GET /v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
		// Transfer-Encoding spellings
		post("te/Chunked", "Transfer-Encoding: Chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/CHUNKED", "Transfer-Encoding: CHUNKED\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/' chunked' (extra OWS)", "Transfer-Encoding:  chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/'chunked ' (trailing OWS)", "Transfer-Encoding: chunked \r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/xchunked", "Transfer-Encoding: xchunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/chunked, identity", "Transfer-Encoding: chunked, identity\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/identity, chunked", "Transfer-Encoding: identity, chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/identity", "Transfer-Encoding: identity\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/identity with CL", "Transfer-Encoding: identity\r\nContent-Length: 5\r\n", "hello"),
		post("te/chunked, chunked", "Transfer-Encoding: chunked, chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/two TE headers gzip+chunked", "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/two TE headers chunked+chunked", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/gzip alone", "Transfer-Encoding: gzip\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		post("te/empty", "Transfer-Encoding: \r\n", "3\r\nabc\r\n0\r\n\r\n"),
		one("te/in HTTP/1.0", "classic", "POST /v1/x HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"+next),
		one("te/in HTTP/1.0 with CL", "classic", "POST /v1/x HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"+next),
		// chunk sizes
		chunkedPost("extension", "3;name=val\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("extension quoted", "3;n=\"a;b\"\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("extension bare ;", "3;\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("extension with space before ;", "3 ;x\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size leading space", " 3\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size trailing space", "3 \r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size trailing tab", "3\t\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size 0x3", "0x3\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size leading zeros", "0003\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size uppercase hex", "A\r\n0123456789\r\n0\r\n\r\n"),
		chunkedPost("size overflow", "fffffffffffffffff1\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size 16 hex digits", "ffffffffffffffff\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size negative", "-3\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size empty", "\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("size not hex", "g\r\nabc\r\n0\r\n\r\n"),
		chunkedPost("data missing CRLF", "3\r\nabcXX0\r\n\r\n"),
		chunkedPost("data too long", "3\r\nabcd\r\n0\r\n\r\n"),
		chunkedPost("data then LF only", "3\r\nabc\n0\r\n\r\n"),
		chunkedPost("all LF only", "3\nabc\n0\n\n"),
		chunkedPost("last chunk 000", "3\r\nabc\r\n000\r\n\r\n"),
		chunkedPost("last chunk with extension", "3\r\nabc\r\n0;x=y\r\n\r\n"),
		chunkedPost("trailers", "3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n"),
		chunkedPost("trailer Content-Length", "3\r\nabc\r\n0\r\nContent-Length: 50\r\n\r\n"),
		chunkedPost("trailer Transfer-Encoding", "3\r\nabc\r\n0\r\nTransfer-Encoding: chunked\r\n\r\n"),
		chunkedPost("trailer Host", "3\r\nabc\r\n0\r\nHost: evil\r\n\r\n"),
		// not in parserdiff's corpus: two more of the names fasthttp refuses as trailers
		chunkedPost("trailer Authorization", "3\r\nabc\r\n0\r\nAuthorization: Bearer t\r\n\r\n"),
		chunkedPost("trailer X-Forwarded-For", "3\r\nabc\r\n0\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n"),
		chunkedPost("trailer bad syntax", "3\r\nabc\r\n0\r\nno colon here\r\n\r\n"),
		chunkedPost("trailer obs-fold", "3\r\nabc\r\n0\r\nX-T: a\r\n b\r\n\r\n"),
		chunkedPost("no last chunk", "3\r\nabc\r\n"),
		chunkedPost("no final CRLF", "3\r\nabc\r\n0\r\n"),
		// line endings and header syntax
		get("syntax/bare LF", "GET /v1/x HTTP/1.1\nHost: x\nX-A: 1\n\n"),
		get("syntax/bare LF after request line only", "GET /v1/x HTTP/1.1\nHost: x\r\nX-A: 1\r\n\r\n"),
		get("syntax/bare LF end of headers", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\n"),
		get("syntax/bare CR", "GET /v1/x HTTP/1.1\rHost: x\rX-A: 1\r\r"),
		get("syntax/CR inside line", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: 1\rX-B: 2\r\n\r\n"),
		get("syntax/space before colon", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n"),
		post("syntax/space before colon in CL", "Content-Length : 5\r\n", "hello"),
		post("syntax/space before colon in TE", "Transfer-Encoding : chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"),
		get("syntax/tab before colon", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A\t: 1\r\n\r\n"),
		get("syntax/no space after colon", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A:1\r\n\r\n"),
		get("syntax/value trailing spaces", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: 1  \r\n\r\n"),
		get("syntax/obs-fold space", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n"),
		get("syntax/obs-fold tab", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\t2\r\n\r\n"),
		post("syntax/obs-fold in CL", "Content-Length: 5\r\n 5\r\n", "hello"),
		get("syntax/first header line folded", "GET /v1/x HTTP/1.1\r\n Host: x\r\n\r\n"),
		get("syntax/empty header name", "GET /v1/x HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n"),
		get("syntax/header without colon", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A\r\n\r\n"),
		get("syntax/header name with space", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX A: 1\r\n\r\n"),
		get("syntax/header name non-token @", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX@A: 1\r\n\r\n"),
		get("syntax/header name non-ASCII", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-\xc3\xa9: 1\r\n\r\n"),
		get("syntax/NUL in value", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n"),
		get("syntax/DEL in value", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n"),
		get("syntax/control 0x01 in value", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n"),
		get("syntax/tab in value", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: a\tb\r\n\r\n"),
		get("syntax/UTF-8 in value", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: caf\xc3\xa9\r\n\r\n"),
		get("syntax/latin-1 0xe9 in value", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-A: caf\xe9\r\n\r\n"),
		get("syntax/NUL in name", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-\x00A: 1\r\n\r\n"),
		get("syntax/DEL in name", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-\x7fA: 1\r\n\r\n"),
		get("syntax/CR in name", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-\rA: 1\r\n\r\n"),
		get("syntax/lowercase names", "GET /v1/x HTTP/1.1\r\nhost: x\r\nx-smg-routing-key: k\r\ncontent-type: a/b\r\nuser-agent: u\r\ncookie: c=1\r\n\r\n"),
		get("syntax/routing headers upper case", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-SMG-TARGET-WORKER: 0\r\nAUTHORIZATION: Bearer t\r\n\r\n"),
		get("syntax/routing headers canonical case", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-Smg-Routing-Key: k\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n"),
		get("syntax/routing key header twice", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-SMG-Routing-Key: a\r\nX-SMG-Routing-Key: b\r\n\r\n"),
		get("syntax/duplicate names mixed case", "GET /v1/x HTTP/1.1\r\nHost: x\r\nX-Trace: a\r\nx-trace: b\r\nX-TRACE: c\r\n\r\n"),
		get("syntax/two Cookie headers", "GET /v1/x HTTP/1.1\r\nHost: x\r\nCookie: a=1\r\nCookie: b=2; c=3\r\n\r\n"),
		get("syntax/two User-Agent headers", "GET /v1/x HTTP/1.1\r\nHost: x\r\nUser-Agent: a\r\nUser-Agent: b\r\n\r\n"),
		get("syntax/two Content-Type headers", "GET /v1/x HTTP/1.1\r\nHost: x\r\nContent-Type: a/b\r\nContent-Type: c/d\r\n\r\n"),
		get("syntax/leading CRLF before request line", "\r\nGET /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("syntax/two leading CRLF", "\r\n\r\nGET /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		// the target
		get("target/UTF-8", "GET /v1/caf\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/0xff", "GET /v1/\xff HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/control 0x01", "GET /v1/a\x01b HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/DEL", "GET /v1/a\x7fb HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/tab inside", "GET /v1/a\tb HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/fragment", "GET /v1/x#frag HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/backslash", "GET /v1\\..\\admin HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/double slash", "GET //v1//x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/dot segments", "GET /v1/./a/../b HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/absolute-form http", "GET http://evil.example/v1/x?q=1 HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/absolute-form https", "GET https://evil.example/v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/absolute-form no path", "GET http://evil.example HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/absolute-form with userinfo", "GET http://u:p@evil.example/v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/authority-form CONNECT", "CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n"),
		get("target/asterisk GET", "GET * HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/relative no slash", "GET v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("target/query only", "GET ?a=1 HTTP/1.1\r\nHost: x\r\n\r\n"),
		// Host
		get("host/missing HTTP/1.1", "GET /v1/x HTTP/1.1\r\nX-A: 1\r\n\r\n"),
		get("host/two same", "GET /v1/x HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n"),
		get("host/two different", "GET /v1/x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
		get("host/empty", "GET /v1/x HTTP/1.1\r\nHost: \r\n\r\n"),
		get("host/with path", "GET /v1/x HTTP/1.1\r\nHost: a/b\r\n\r\n"),
		get("host/with space", "GET /v1/x HTTP/1.1\r\nHost: a b\r\n\r\n"),
		get("host/with userinfo", "GET /v1/x HTTP/1.1\r\nHost: u@a\r\n\r\n"),
		get("host/absolute-form disagrees", "GET http://a/v1/x HTTP/1.1\r\nHost: b\r\n\r\n"),
		// versions and keep-alive
		one("version/HTTP/1.0 no keep-alive", "classic", "GET /v1/x HTTP/1.0\r\n\r\n"+next),
		one("version/HTTP/1.0 keep-alive", "classic", "GET /v1/x HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /v1/y HTTP/1.0\r\n\r\n"),
		one("version/HTTP/1.1 Connection: close then more", "classic", "GET /v1/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"+next),
		one("version/Connection: keep-alive, close", "classic", "GET /v1/x HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n"+next),
		one("version/Connection: CLOSE", "classic", "GET /v1/x HTTP/1.1\r\nHost: x\r\nConnection: CLOSE\r\n\r\n"+next),
		one("version/HTTP/0.9", "classic", "GET /v1/x\r\n"),
		get("version/HTTP/2.0", "GET /v1/x HTTP/2.0\r\nHost: x\r\n\r\n"),
		one("version/h2 preface", "classic", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
		get("version/HTTP/1.2", "GET /v1/x HTTP/1.2\r\nHost: x\r\n\r\n"),
		get("version/HTTP/1.10", "GET /v1/x HTTP/1.10\r\nHost: x\r\n\r\n"),
		get("version/HTTP/3.0", "GET /v1/x HTTP/3.0\r\nHost: x\r\n\r\n"),
		get("version/lowercase http/1.1", "GET /v1/x http/1.1\r\nHost: x\r\n\r\n"),
		get("version/HTTP/1.1 with trailing space", "GET /v1/x HTTP/1.1 \r\nHost: x\r\n\r\n"),
		get("version/missing", "GET /v1/x \r\nHost: x\r\n\r\n"),
		// the request line
		get("line/two spaces after method", "GET  /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("line/two spaces before version", "GET /v1/x  HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("line/tabs as separators", "GET\t/v1/x\tHTTP/1.1\r\nHost: x\r\n\r\n"),
		get("line/leading space", " GET /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("line/space inside target", "GET /v1/a b HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("line/empty target", "GET  HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("method/lowercase get", "get /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("method/mixed case Post", "Post /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
		get("method/custom token PURGE", "PURGE /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("method/invalid G@T", "G@T /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("method/invalid with NUL", "GE\x00T /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("method/empty", " /v1/x HTTP/1.1\r\nHost: x\r\n\r\n"),
		get("method/HEAD with CL body", "HEAD /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"),
		// sizes
		one("size/header block 64 KiB - 1", "classic", headerOfSize(maxHeaderBytes-1)),
		one("size/header block 64 KiB", "classic", headerOfSize(maxHeaderBytes)),
		one("size/header block 64 KiB + 1", "classic", headerOfSize(maxHeaderBytes+1)),
		one("size/header block 64 KiB + 4 KiB - 1", "classic", headerOfSize(maxHeaderBytes+4096-1)),
		one("size/header block 64 KiB + 4 KiB", "classic", headerOfSize(maxHeaderBytes+4096)),
		one("size/header block 64 KiB + 4 KiB + 1", "classic", headerOfSize(maxHeaderBytes+4096+1)),
		one("size/header block 128 KiB", "classic", headerOfSize(2*maxHeaderBytes)),
		one("size/request line 70 KiB", "classic", "GET /"+long+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
		one("size/header line 70 KiB", "classic", "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Long: "+long+"\r\n\r\n"),
		one("size/request line 5 KiB (over fasthttp's default 4 KiB buffer)", "classic", "GET /"+long[:5<<10]+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
		parts("conn/nothing sent", "classic", false, ""),
		// Expect and pipelining
		post("expect/100-continue with body", "Expect: 100-continue\r\nContent-Length: 5\r\n", "hello"),
		parts("expect/100-continue, body after a pause", "classic", false, "POST /v1/x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", "hello"+next),
		post("expect/100-Continue mixed case", "Expect: 100-Continue\r\nContent-Length: 5\r\n", "hello"),
		post("expect/unknown expectation", "Expect: foo\r\nContent-Length: 5\r\n", "hello"),
		// not in parserdiff's corpus: a 100-continue request refused before its body
		one("expect/100-continue with a malformed Host", "classic", "POST /v1/x HTTP/1.1\r\nHost: u@a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"),
		one("expect/100-continue with identity", "classic", "POST /v1/x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nTransfer-Encoding: identity\r\nContent-Length: 5\r\n\r\n"),
		one("expect/100-continue over max_body_size", "classic", "POST /v1/x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 52428800\r\n\r\n"),
		one("expect/100-continue in HTTP/1.0", "classic", "POST /v1/x HTTP/1.0\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello"),
		post("pipeline/second request after a CL body", "Content-Length: 5\r\n", "hello"),
		post("pipeline/second request after a chunked body", "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
		one("pipeline/three GETs", "classic", "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n"+next),
		one("pipeline/garbage after a request", "classic", "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nTHIS IS NOT HTTP\r\n\r\n"),
	}
}

func corpus() []wireCase {
	return append(append(pythonCases(), goCases()...), classicCases()...)
}
