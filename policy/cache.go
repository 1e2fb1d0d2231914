package policy

import (
	"encoding/binary"
	"strconv"
	"sync"
)

// cacheKey is the full input of a decision.
type cacheKey struct {
	dns          bool
	host         string // host or DNS name, normalised
	port         uint16 // port, or DNS qtype
	exe          string
	ancestors    []string
	identityNone bool
}

// append appends the key's encoding, the decision cache's map key: every
// string length-prefixed, so no two inputs share one (["a", "b"] is not
// ["a\x00b"], [] is not [""]).
func (k *cacheKey) append(b []byte) []byte {
	var flags byte
	if k.dns {
		flags |= 1
	}
	if k.identityNone {
		flags |= 2
	}
	b = append(b, flags, byte(k.port>>8), byte(k.port))
	b = appendString(b, k.host)
	b = appendString(b, k.exe)
	b = binary.AppendUvarint(b, uint64(len(k.ancestors)))
	for _, a := range k.ancestors {
		b = appendString(b, a)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// keyBuf is the stack buffer a lookup encodes its key into (a longer key
// spills to the heap).
type keyBuf [256]byte

// String names the decision for messages: "host:port" or "DNS name".
func (k cacheKey) String() string {
	if k.dns {
		return "DNS " + k.host
	}
	return k.host + ":" + strconv.Itoa(int(k.port))
}

// decisionCache is a bounded two-generation cache: lookups hit the current
// or the previous generation (a hit in the previous one is promoted); when
// the current generation is full it becomes the previous one and the
// oldest is dropped. Memory stays below 2*size entries with no per-entry
// bookkeeping. One cache belongs to one policy version.
type decisionCache struct {
	mu       sync.Mutex
	size     int
	cur, old map[string]Decision // by cacheKey.append
}

func newDecisionCache(size int) *decisionCache {
	return &decisionCache{size: size, cur: make(map[string]Decision)}
}

func (c *decisionCache) get(k *cacheKey) (Decision, bool) {
	if c.size == 0 {
		return Decision{}, false
	}
	var buf keyBuf
	enc := k.append(buf[:0])
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.cur[string(enc)]; ok { // no allocation: a lookup by bytes
		return d, true
	}
	d, ok := c.old[string(enc)]
	if ok {
		c.insert(string(enc), d)
	}
	return d, ok
}

func (c *decisionCache) put(k *cacheKey, d Decision) {
	if c.size == 0 {
		return
	}
	var buf keyBuf
	enc := string(k.append(buf[:0]))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.insert(enc, d)
}

func (c *decisionCache) insert(k string, d Decision) {
	if len(c.cur) >= c.size {
		c.old, c.cur = c.cur, make(map[string]Decision, c.size)
	}
	c.cur[k] = d
}

// len reports the number of entries held (both generations).
func (c *decisionCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}
