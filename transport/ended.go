package transport

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
)

// OnEndpointEnded calls fn once when this process's connection to the
// peer at addr ends (protoactor's EndpointTerminatedEvent: the peer died,
// restarted, or could not be reached), so that a caller waiting on that
// peer can give up at once instead of waiting out a timeout. fn runs on
// the publisher's goroutine and must not block. stop unsubscribes.
func OnEndpointEnded(sys *actor.ActorSystem, addr string, fn func()) (stop func()) {
	var once sync.Once
	sub := sys.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*remote.EndpointTerminatedEvent); ok && e.Address == addr {
			once.Do(fn)
		}
	})
	return func() { sys.EventStream.Unsubscribe(sub) }
}
