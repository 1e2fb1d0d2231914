package supervisor

import (
	"context"
	"syscall"

	"github.com/stockade-dev/stockade/sandbox/nsrun"
	"github.com/stockade-dev/stockade/supervisor/sshd"
)

// nsSpawner starts SSH session processes inside the sandbox through its
// init (nsrun.Sandbox.Exec): the workload's namespaces, uid mapping,
// Landlock and capabilities, never the supervisor's.
type nsSpawner struct{ sb *nsrun.Sandbox }

func (n nsSpawner) Spawn(ctx context.Context, req sshd.SpawnRequest) (sshd.Proc, error) {
	p, err := n.sb.Exec(ctx, nsrun.ExecSpec{
		Argv: req.Argv, Env: req.Env, Workdir: req.Workdir,
		Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr,
		Setsid: req.Setsid, Setctty: req.Setctty,
	})
	if err != nil {
		return nil, err
	}
	return nsProc{p}, nil
}

type nsProc struct{ p *nsrun.Process }

func (q nsProc) Wait() (int, string, error) {
	st, err := q.p.Wait()
	if err != nil {
		return -1, "", err
	}
	if st.Signal != 0 {
		return -1, sshd.SignalName(st.Signal), nil
	}
	return st.Code, "", nil
}

func (q nsProc) Signal(sig syscall.Signal) error { return q.p.Signal(sig) }
