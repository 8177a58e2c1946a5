package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

)

// rawWorker is a loopback TCP server whose connections serve handles, each on its own
// goroutine; the test closes the listener and every connection at its end, which ends the
// handlers' loops.
func rawWorker(t *testing.T, serve func(conn net.Conn)) (addr string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	accepted = new(atomic.Int32)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			accepted.Add(1)
			go func() {
				defer conn.Close()
				serve(conn)
			}()
		}
	}()
	return ln.Addr().String(), accepted
}

// readRaw reads one request's bytes as they arrived: the header, then Content-Length bytes.
func readRaw(br *bufio.Reader) ([]byte, error) {
	var raw bytes.Buffer
	length := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		raw.WriteString(line)
		if name, value, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(value))
		}
		if line == "\r\n" {
			break
		}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(br, body); err != nil {
		return nil, err
	}
	raw.Write(body)
	return raw.Bytes(), nil
}

// answering serves every request on a connection with answer, and sends what it read to got.
func answering(answer string, got chan<- []byte) func(net.Conn) {
	return func(conn net.Conn) {
		br := bufio.NewReader(conn)
		for {
			raw, err := readRaw(br)
			if err != nil {
				return
			}
			if got != nil {
				got <- raw
			}
			if _, err := io.WriteString(conn, answer); err != nil {
				return
			}
		}
	}
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
