package boundary

import (
	"fmt"
	"net"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/boundary/proxy"
	"github.com/stockade-dev/stockade/internal/logx"
)

// The one setup of a boundary, used by `boundary serve` and by every
// supervisor: they differ only in their listeners and identity resolver.

// Upstreams picks where allowed DNS names are answered and how CONNECT
// targets resolve: a static hosts file, a DNS server to forward to, or
// the system's resolv.conf (in that order of preference).
func Upstreams(hostsFile, dnsUpstream string) (dnsproxy.Upstream, proxy.Resolver, error) {
	switch {
	case hostsFile != "":
		h, err := dnsproxy.LoadHosts(hostsFile)
		if err != nil {
			return nil, nil, fmt.Errorf("boundary: %w", err)
		}
		return h, proxy.UpstreamResolver{Up: h}, nil
	case dnsUpstream != "":
		fw, err := dnsproxy.NewForwarder([]string{dnsUpstream})
		if err != nil {
			return nil, nil, fmt.Errorf("boundary: %w", err)
		}
		return fw, proxy.UpstreamResolver{Up: fw}, nil
	default:
		sys, err := dnsproxy.SystemUpstream("/etc/resolv.conf")
		if err != nil {
			return nil, nil, fmt.Errorf("boundary: %w (pass a DNS upstream or a hosts file)", err)
		}
		return sys, net.DefaultResolver, nil
	}
}

// LogDenialsPerMinute is how many denial lines a boundary with an audit
// file writes to its log each minute; the file has every denial, and the
// log says how many it left out (audit.DenialLimit). A workload flooding
// denials thus grows the file, which rotates, not the log, which may not.
const LogDenialsPerMinute = 100

// Serve starts a boundary for cfg in its own actor system. Its decisions
// go to cfg.Log and, when auditFile is set, to that file too (cfg.Audit is
// set here); with a file, allowed decisions reach the log at debug level
// only and denials up to LogDenialsPerMinute (the file has them all). The
// returned function stops the boundary, says in the log how many denials
// it left out since its last such line, and closes the file.
func Serve(cfg Config, auditFile string) (*Boundary, func(), error) {
	logSink := audit.LogSink{Log: cfg.Log, Out: cfg.LogOut, Bufs: &audit.Bufs{}}
	var af *audit.File
	if auditFile != "" {
		var err error
		if af, err = audit.OpenFile(auditFile, audit.WithErrorLog(cfg.Log)); err != nil {
			return nil, nil, fmt.Errorf("boundary: %w", err)
		}
		// The file has every decision: the log keeps the denials, up to
		// the limit.
		logSink.AllowedAtDebug = true
		logSink.Denials = audit.NewDenialLimit(cfg.Log, LogDenialsPerMinute, time.Minute)
	}
	sinks := audit.Multi{logSink}
	if af != nil {
		sinks = append(sinks, af)
	}
	cfg.Audit = sinks
	closeAudit := func() {
		if af != nil {
			logSink.Denials.Flush()
			_ = af.Close()
		}
	}
	sys := actor.NewActorSystem(logx.ActorSystemOption(cfg.Log))
	b, err := Start(sys, cfg)
	if err != nil {
		sys.Shutdown()
		closeAudit()
		return nil, nil, fmt.Errorf("boundary: %w", err)
	}
	return b, func() {
		_ = b.Stop()
		sys.Shutdown()
		closeAudit()
	}, nil
}
