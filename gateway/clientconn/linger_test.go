package clientconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

const (
	request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 204800\r\n\r\n"
	answer  = "HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
)

var body = bytes.Repeat([]byte("x"), 200<<10)

// refuse reads the request's head only and answers, leaving the body unread, as a server
// that refuses a body too large does (the parserdiff report, item 18).
func refuse(t *testing.T, c net.Conn) {
	t.Helper()
	head := make([]byte, len(request))
	if _, err := io.ReadFull(c, head); err != nil {
		t.Error(err)
		return
	}
	if _, err := c.Write([]byte(answer)); err != nil {
		t.Error(err)
	}
}

// readAnswer reads what the server sent until it closed, failing on a reset.
func readAnswer(t *testing.T, client net.Conn) {
	t.Helper()
	got, err := io.ReadAll(client)
	if err != nil {
		t.Fatalf("the client lost the answer: read %q, then %v", got, err)
	}
	if string(got) != answer {
		t.Fatalf("the client read %q, want %q", got, answer)
	}
}

// The client's body is unread when the server answers and closes: it still reads the answer.
// (The client's body fits in the loopback's socket buffers, so its Write returns.)
func TestCloseKeepsTheAnswerWithTheRequestUnread(t *testing.T) {
	l := listen(t, Options{})
	c, client := pair(t, l)
	if _, err := client.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write(body); err != nil {
		t.Fatal(err)
	}
	refuse(t, c)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	readAnswer(t, client)
	client.Close()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// The server has answered and is closing when the client sends its body.
func TestCloseKeepsTheAnswerWhenTheClientSendsAfterIt(t *testing.T) {
	l := listen(t, Options{})
	c, client := pair(t, l)
	if _, err := client.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	refuse(t, c)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	if _, err := client.Write(body); err != nil {
		t.Fatalf("the client's body was refused by a reset: %v", err)
	}
	readAnswer(t, client)
	client.Close()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// Without the linger the first case ends in a reset, which readAnswer would see. Whether the
// reset also takes the answer depends on when the client reads it, so only the reset is checked.
func TestAPlainCloseLosesTheAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Write(body); err != nil {
		t.Fatal(err)
	}
	refuse(t, c)
	c.Close()
	got, err := io.ReadAll(client)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a plain close: the client read %q, then %v; want a reset", got, err)
	}
}

// The client sends for ever: Close stops reading at LingerBytes.
func TestCloseStopsAtLingerBytes(t *testing.T) {
	l := listen(t, Options{LingerTimeout: time.Hour, LingerBytes: 64 << 10})
	c, client := pair(t, l)
	sending := make(chan struct{})
	go func() {
		defer close(sending)
		defer client.Close() // so that a Close which does not stop at the bound still ends
		for range 4 << 10 {  // 64 MiB at most, far past the bound and the socket buffers
			if _, err := client.Write(body[:16<<10]); err != nil {
				return
			}
		}
		t.Error("the client could send 64 MiB to a closed connection")
	}()
	within(t, "Close", func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	within(t, "the client's writes", func() { <-sending })
}

// The client neither sends nor closes: Close stops waiting at LingerTimeout.
func TestCloseStopsAtLingerTimeout(t *testing.T) {
	l := listen(t, Options{LingerTimeout: 50 * time.Millisecond})
	c, _ := pair(t, l)
	within(t, "Close", func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
}

// A Read waiting on the connection does not hold Close: the linger's deadline ends it.
func TestCloseWhileAReadWaits(t *testing.T) {
	l := listen(t, Options{LingerTimeout: 50 * time.Millisecond})
	c, _ := pair(t, l)
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	within(t, "Close", func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	within(t, "the waiting Read", func() {
		if err := <-read; err == nil {
			t.Error("the waiting Read returned no error")
		}
	})
}

func TestCloseIsIdempotent(t *testing.T) {
	l := listen(t, Options{})
	c, client := pair(t, l)
	client.Close()
	for range 3 {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
