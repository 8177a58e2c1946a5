package zmqguard

// For the tests of package zmqguard_test, which run the transport under zmq4 sockets.
var (
	Greeting   = greeting
	LongHeader = longHeader
)

const FlagCommand = flagCommand
