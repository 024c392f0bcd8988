package app

// What the tests of package app_test read of the unexported replies.
var (
	ChargeReply = chargeReply
	VoidReply   = voidReply
)
