package httpcheck

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The client's side of the parity test: each case on a fresh loopback connection, and what
// came back split into answers.
const (
	connBound = 2 * time.Second        // per connection: past both servers' 1 s timeouts
	partPause = 300 * time.Millisecond // between the parts of a case sent in pieces
	maxAnswer = 1 << 20                // bytes read back per connection
)

// wireCase is one hostile input: its bytes, sent as one write or as parts with a pause between.
type wireCase struct {
	Name       string
	Source     string
	Parts      [][]byte
	CloseAfter bool // the client closes its connection after the last part (an abandoned upload)
}

// answer is one response parsed out of what a server wrote on the connection.
type answer struct {
	Status int
	Echo   *echo // the handler's echo of a request it served
}

// outcome is everything one server did with one case's connection.
type outcome struct {
	Answers []answer
	End     string // closed | reset | open (at the bound) | client-closed
	Garbage bool   // bytes after the last answer that parse as none
}

func send(addr string, c wireCase) outcome {
	conn, err := net.DialTimeout("tcp", addr, connBound)
	if err != nil {
		return outcome{End: "dial error: " + err.Error()}
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(connBound))
	go func() {
		for i, p := range c.Parts {
			if i > 0 {
				time.Sleep(partPause)
			}
			if _, err := conn.Write(p); err != nil {
				return // the server answered and closed before it was all sent
			}
		}
		if c.CloseAfter {
			time.Sleep(partPause)
			conn.Close()
		}
	}()
	got, end := readAll(conn)
	if c.CloseAfter && end != "closed" && end != "reset" {
		end = "client-closed"
	}
	o := outcome{End: end}
	o.Answers, o.Garbage = parseAnswers(got)
	return o
}

func readAll(conn net.Conn) ([]byte, string) {
	var buf bytes.Buffer
	chunk := make([]byte, 32<<10)
	for buf.Len() < maxAnswer {
		n, err := conn.Read(chunk)
		buf.Write(chunk[:n])
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return buf.Bytes(), "closed"
		case errors.Is(err, os.ErrDeadlineExceeded):
			return buf.Bytes(), "open"
		case errors.Is(err, syscall.ECONNRESET):
			return buf.Bytes(), "reset"
		case errors.Is(err, net.ErrClosed):
			return buf.Bytes(), "client-closed"
		default:
			return buf.Bytes(), "error: " + err.Error()
		}
	}
	return buf.Bytes(), "answer over 1 MiB"
}

// parseAnswers splits a connection's bytes into answers. The echo is in an X-Echo header, so a
// HEAD's answer (no body) is known by the echoed method.
func parseAnswers(b []byte) ([]answer, bool) {
	br := bufio.NewReader(bytes.NewReader(b))
	var out []answer
	for range 64 {
		if _, err := br.Peek(1); err != nil {
			return out, false
		}
		a, ok := parseAnswer(br)
		if !ok {
			return out, true
		}
		out = append(out, a)
	}
	return out, true
}

func parseAnswer(br *bufio.Reader) (answer, bool) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return answer{}, false
	}
	f := strings.SplitN(line, " ", 3)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return answer{}, false
	}
	status, err := strconv.Atoi(f[1])
	if err != nil {
		return answer{}, false
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return answer{}, false
	}
	a := answer{Status: status}
	if x := h.Get("X-Echo"); x != "" {
		if j, err := base64.StdEncoding.DecodeString(x); err == nil {
			a.Echo = new(echo)
			json.Unmarshal(j, a.Echo)
		}
	}
	switch {
	case status < 200 || status == 204 || status == 304 || a.Echo != nil && a.Echo.Method == "HEAD":
	case h.Get("Content-Length") != "":
		n, _ := strconv.Atoi(h.Get("Content-Length"))
		if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
			return a, false
		}
	default: // the rest of the connection
		io.Copy(io.Discard, br)
	}
	return a, true
}
