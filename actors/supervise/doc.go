// Package supervise owns how stockade supervises actors: one-for-one
// strategies that log every directive with the failing child, the reason
// and the message that was being handled (protoactor drops that message and
// logs no stack), counters of directives per actor kind, and a receiver
// middleware that logs the stack of a panic before protoactor's mailbox
// recovers it.
package supervise
