//go:build linux

package clientconn_test

import (
	"context"
	"fmt"
	"net"

	"github.com/bounded-router/bounded-router/gateway/clientconn"
)

// A handler ties the worker's request to its client: the context is cancelled when the
// client leaves, and stop, deferred, ends the watch when the answer has been written.
func ExampleConn_Watch() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	l, err := clientconn.Listen(ln, clientconn.Options{})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		panic(err)
	}
	nc, err := l.Accept()
	if err != nil {
		panic(err)
	}
	c := nc.(*clientconn.Conn)
	defer c.Close()

	ctx, cancel := context.WithCancel(context.Background())
	stop := c.Watch(cancel)
	client.Close() // the client gives up while the worker thinks
	<-ctx.Done()   // the worker's request, cancelled
	fmt.Println("the client left:", stop())
	// Output: the client left: true
}
