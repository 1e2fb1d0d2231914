package policy

import (
	"strconv"
	"sync"
)

// cacheKey is the full input of a decision.
type cacheKey struct {
	dns          bool
	host         string // host or DNS name, normalised
	port         uint16 // port, or DNS qtype
	exe          string
	ancestors    string // joined with NUL
	identityNone bool
}

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
	cur, old map[cacheKey]Decision
}

func newDecisionCache(size int) *decisionCache {
	return &decisionCache{size: size, cur: make(map[cacheKey]Decision)}
}

func (c *decisionCache) get(k cacheKey) (Decision, bool) {
	if c.size == 0 {
		return Decision{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.cur[k]; ok {
		return d, true
	}
	d, ok := c.old[k]
	if ok {
		c.insert(k, d)
	}
	return d, ok
}

func (c *decisionCache) put(k cacheKey, d Decision) {
	if c.size == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.insert(k, d)
}

func (c *decisionCache) insert(k cacheKey, d Decision) {
	if len(c.cur) >= c.size {
		c.old, c.cur = c.cur, make(map[cacheKey]Decision, c.size)
	}
	c.cur[k] = d
}

// len reports the number of entries held (both generations).
func (c *decisionCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.old)
}
