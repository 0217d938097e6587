package agentproc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/api"
)

// Bounds on the benchmarks' agent child process.
const (
	// agentAPITimeout bounds start -> the API answers (measured 0.3-2 s:
	// BPF programs load, the runtime is dialled, pods are adopted).
	agentAPITimeout = 60 * time.Second
	// agentStopTimeout bounds SIGTERM -> exit, after which it is killed.
	agentStopTimeout = 30 * time.Second
)

// Agent is the real agent under a benchmark: `nodeguard run` from a
// nodeguard binary, a child process with its configuration file, state
// directory and API socket under one directory, and its output appended
// to one log file across restarts. Its pods outlive it: a restart adopts
// them.
type Agent struct {
	bin, dir, sock string
	// flags of `run` after --config, --root-dir and --api-socket.
	flags []string
	log   *os.File

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{}
	client *api.Client
}

// New prepares an agent from the binary bin under dir (which must exist),
// with flags given to `run` after --config, --root-dir and --api-socket;
// its output goes to logPath ("" is dir/agent.log). Nothing runs until
// Start.
func New(bin, dir, logPath string, flags []string) (*Agent, error) {
	if logPath == "" {
		logPath = filepath.Join(dir, "agent.log")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("agent log: %w", err)
	}
	return &Agent{bin: bin, dir: dir, sock: filepath.Join(dir, "api.sock"), flags: flags, log: logf}, nil
}

// PrivateNetwork is the network section of an agent configuration for the
// private containerd env: the agent checks that network and never writes
// into /etc/cni/net.d.
func PrivateNetwork(env *crienv.Env) map[string]any {
	nc := env.NetworkConfig()
	return map[string]any{
		"manage": false, "name": nc.Name, "bridge": nc.Bridge, "subnet": nc.Subnet.String(),
		"cniBinDirs": nc.BinDirs, "cniConfDir": nc.ConfDir, "ipamDir": nc.IPAMDir,
		"nodeNetNS": env.NetNS(), "netnsDirs": []string{env.NetNSDir()},
	}
}

// Client is the API client of the running agent (a new one per start; nil
// before the first).
func (a *Agent) Client() *api.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.client
}

// PID is the running agent's process id (0 when none runs).
func (a *Agent) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return 0
	}
	return a.cmd.Process.Pid
}

// LogPath is where its output goes.
func (a *Agent) LogPath() string { return a.log.Name() }

// Socket is the path of its API socket.
func (a *Agent) Socket() string { return a.sock }

// Start writes conf as the agent's configuration file, starts it and
// waits until its API answers. The agent must not be running. On an
// error the agent is stopped again.
func (a *Agent) Start(ctx context.Context, conf map[string]any) (retErr error) {
	a.mu.Lock()
	running := a.cmd != nil
	a.mu.Unlock()
	if running {
		return errors.New("start the agent: it is running")
	}
	if _, ok := conf["imagePull"]; !ok {
		// The benchmarks' images are built locally into the runtime and
		// no registry is reachable: nothing is pulled.
		conf = maps.Clone(conf)
		conf["imagePull"] = false
	}
	b, err := yaml.Marshal(conf)
	if err != nil {
		return fmt.Errorf("encode the agent's configuration: %w", err)
	}
	confPath := filepath.Join(a.dir, "config.yaml")
	if err := os.WriteFile(confPath, b, 0o600); err != nil {
		return fmt.Errorf("write the agent's configuration: %w", err)
	}
	args := append([]string{"run", "--config", confPath, "--root-dir", filepath.Join(a.dir, "state"), "--api-socket", a.sock}, a.flags...)
	fmt.Fprintf(a.log, "=== %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(a.bin, args...)
	cmd.Stdout, cmd.Stderr = a.log, a.log
	exited, err := startLocked(cmd)
	if err != nil {
		return fmt.Errorf("start the agent: %w", err)
	}
	client := api.NewClient(a.sock)
	a.mu.Lock()
	a.cmd, a.exited, a.client = cmd, exited, client
	a.mu.Unlock()
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, a.Stop())
		}
	}()
	deadline := time.Now().Add(agentAPITimeout)
	for {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.List(lctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the agent exited before its API answered (%s): %s", cmd.ProcessState, a.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent's API did not answer within %v: %w", agentAPITimeout, err)
		}
	}
}

// Stop asks the agent to stop (SIGTERM), waits up to agentStopTimeout,
// then kills it. Its pods keep running. Stopping an agent that does not
// run does nothing.
func (a *Agent) Stop() error {
	a.mu.Lock()
	cmd, exited, client := a.cmd, a.exited, a.client
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return nil
	}
	client.Close()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(agentStopTimeout):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("the agent did not stop within %v of SIGTERM; killed (log %s)", agentStopTimeout, a.log.Name())
	}
}

// Close stops the agent and closes its log.
func (a *Agent) Close() error {
	err := a.Stop()
	return errors.Join(err, a.log.Close())
}

// logTail is the last lines of the agent's log, for an error.
func (a *Agent) logTail() string {
	b, err := os.ReadFile(a.log.Name())
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// startLocked starts cmd with SIGKILL as its parent-death signal and
// returns a channel closed once it has exited and been waited for.
//
// The death signal fires when the parent THREAD exits, and the Go runtime
// ends a thread when a goroutine locked to it exits (namespace code does
// that), so the child is started from a thread locked for its life.
func startLocked(cmd *exec.Cmd) (exited <-chan struct{}, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// FreeLoopbackAddr is a loopback TCP address free a moment ago.
func FreeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
