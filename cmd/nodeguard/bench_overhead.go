package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/internal/crienv"
	"github.com/nodeguard/nodeguard/lifecycle/api"
)

// overheadAgentName is the row of the agent in the overhead figures.
const overheadAgentName = "nodeguard"

func newBenchOverheadCmd(g *globalFlags) *cobra.Command {
	cfg := bench.OverheadConfig{Window: 60 * time.Second, Parallel: 4}
	var out, profileDir string
	pods := []int{110}
	cmd := &cobra.Command{
		Use:   "overhead",
		Short: "CPU and RSS of the agent (and of containerd) with 110 and 250 pods, idle and under churn",
		Long: `Starts the private test containerd (its own network namespace, local
images), then the real agent as a child process ("nodeguard run" from this
binary, pointed at that containerd and its network, with its own state
directory, API socket and cgroup root, metrics off), and applies
busybox "sleep 3600" pods through the agent's API until --pods of them run.
It then samples, every second for --window, the CPU (deltas of utime, stime
and the reaped children's cutime and cstime in /proc/<pid>/stat; a process
born between two samples counts whole) and RSS (VmRSS) of the agent, of
containerd, and of the containerd shims together: first idle, then while --parallel workers apply a
fresh pod, wait for it to run, delete it and wait until it is gone, over and
over. With several --pods counts (ascending) it fills up to each in turn.
Prints mean cores and max RSS per process and phase, with the agent's
target (<= 0.05 core idle and <= 80 MiB RSS at 110 pods; the kubelet's
budget is 0.35 core / 300 MiB). --out DIR writes overhead.csv,
overhead-samples.csv and overhead.png. --cpu-profile DIR also serves the
agent's /debug/pprof/ on a loopback port and writes its CPU profile of each
window to DIR (nodeguard-<pods>-<phase>.cpu.pprof, for "go tool pprof");
the profiler's own cost is then in the figures. Every pod is deleted and
the environment removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (retErr error) {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if len(pods) == 0 || !slices.IsSorted(pods) || pods[0] <= 0 || cfg.Window <= 0 || cfg.Parallel <= 0 {
				return fmt.Errorf("--pods must be positive and ascending, --window and --parallel positive")
			}
			cfg.Pods = pods
			ctx := cmd.Context()
			progress := cmd.ErrOrStderr()
			cfg.Progress = progress
			fmt.Fprintln(progress, "overhead: starting the private containerd")
			env, err := crienv.Start(ctx, crienv.Options{Log: log})
			if err != nil {
				return err
			}
			defer func() { retErr = errors.Join(retErr, env.Close()) }()
			cfg.Image = env.BusyboxImage()

			dir, err := os.MkdirTemp("", "ngoverhead")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			metricsAddr := ""
			if profileDir != "" {
				if err := os.MkdirAll(profileDir, 0o755); err != nil {
					return fmt.Errorf("--cpu-profile: %w", err)
				}
				if metricsAddr, err = freeLoopbackAddr(); err != nil {
					return fmt.Errorf("--cpu-profile: %w", err)
				}
				cfg.Profile = func(ctx context.Context, pods int, phase string, window time.Duration) error {
					path := filepath.Join(profileDir, fmt.Sprintf("%s-%d-%s.cpu.pprof", overheadAgentName, pods, phase))
					if err := fetchCPUProfile(ctx, metricsAddr, window, path); err != nil {
						return err
					}
					fmt.Fprintf(progress, "overhead: wrote %s (go tool pprof -top %s)\n", path, path)
					return nil
				}
			}
			agent, client, err := startOverheadAgent(ctx, env, dir, metricsAddr, progress)
			if err != nil {
				return err
			}
			defer func() { retErr = errors.Join(retErr, agent.stop()) }()
			defer client.Close()

			groups := []bench.ProcGroup{
				{Name: overheadAgentName, PIDs: func() ([]int, error) { return []int{agent.cmd.Process.Pid}, nil }},
				{Name: "containerd", PIDs: func() ([]int, error) {
					return bench.FindProcs("/proc", func(argv []string) bool {
						return len(argv) > 0 && filepath.Base(argv[0]) == "containerd" && slices.Contains(argv, filepath.Join(env.Dir(), "config.toml"))
					})
				}},
				{Name: "containerd shims", PIDs: func() ([]int, error) {
					return bench.FindProcs("/proc", func(argv []string) bool {
						return len(argv) > 0 && strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") && slices.Contains(argv, env.Socket())
					})
				}},
			}
			if pids, err := groups[1].PIDs(); err != nil || len(pids) != 1 {
				return fmt.Errorf("find the private containerd's process: %v (found %v)", err, pids)
			}
			rows, err := bench.RunOverhead(ctx, client, groups, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nbusybox pods, %s windows sampled every 1 s, %d churn workers, agent pid %d\n", cfg.Window, cfg.Parallel, agent.cmd.Process.Pid)
			bench.WriteOverheadTable(cmd.OutOrStdout(), rows, overheadAgentName)
			if out != "" {
				files, err := bench.WriteOverheadFiles(out, rows, overheadAgentName, time.Second)
				for _, f := range files {
					fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", f)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().IntSliceVar(&pods, "pods", pods, "running pod counts to measure at, ascending (e.g. 110,250)")
	cmd.Flags().DurationVar(&cfg.Window, "window", cfg.Window, "length of each phase (idle, churn)")
	cmd.Flags().IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "applies in flight while filling, and churn workers")
	cmd.Flags().StringVar(&out, "out", "", "directory for overhead.csv, overhead-samples.csv and overhead.png")
	cmd.Flags().StringVar(&profileDir, "cpu-profile", "", "directory for the agent's CPU profile of each window (serves its /debug/pprof/ on loopback)")
	return cmd
}

// overheadAgent is the agent under measurement, a child process.
type overheadAgent struct {
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{}
}

// stop asks the agent to stop (SIGTERM), waits up to 30 s, then kills it.
func (a *overheadAgent) stop() error {
	defer a.log.Close()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		return fmt.Errorf("the agent did not stop within 30 s of SIGTERM; killed (log %s)", a.log.Name())
	}
}

// freeLoopbackAddr is a loopback TCP address free a moment ago.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// fetchCPUProfile takes the CPU profile of the agent serving /debug/pprof/
// at addr over window (whole seconds, at least one) and writes it to path.
func fetchCPUProfile(ctx context.Context, addr string, window time.Duration, path string) error {
	secs := max(int(window/time.Second), 1)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("CPU profile: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("CPU profile: %w", err)
	}
	return f.Close()
}

// startOverheadAgent writes a run configuration for env's network (the
// agent checks that network and never writes into /etc/cni/net.d), starts
// "nodeguard run" from this binary with its state under dir, and waits
// until its API answers. A metricsAddr also serves its profiler there.
func startOverheadAgent(ctx context.Context, env *crienv.Env, dir, metricsAddr string, progress io.Writer) (_ *overheadAgent, _ *api.Client, retErr error) {
	nc := env.NetworkConfig()
	conf, err := yaml.Marshal(map[string]any{"network": map[string]any{
		"manage": false, "name": nc.Name, "bridge": nc.Bridge, "subnet": nc.Subnet.String(),
		"cniBinDirs": nc.BinDirs, "cniConfDir": nc.ConfDir, "ipamDir": nc.IPAMDir,
		"nodeNetNS": env.NetNS(), "netnsDirs": []string{env.NetNSDir()},
	}})
	if err != nil {
		return nil, nil, err
	}
	confPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(confPath, conf, 0o600); err != nil {
		return nil, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("find this binary: %w", err)
	}
	sock := filepath.Join(dir, "api.sock")
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		return nil, nil, err
	}
	args := []string{"run", "--config", confPath, "--runtime-endpoint", env.Endpoint(),
		"--cgroup-root", env.CgroupParent() + "/ng", "--root-dir", filepath.Join(dir, "state"),
		"--api-socket", sock, "--metrics-addr", metricsAddr, "--log-level", "warn"}
	if metricsAddr != "" {
		args = append(args, "--enable-profiling")
	}
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The agent must not outlive the benchmark if it dies. The death
	// signal fires when the parent THREAD exits, and the Go runtime ends a
	// thread when a goroutine locked to it exits (namespace code does
	// that), so the agent is started from a thread locked for its life.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	a := &overheadAgent{cmd: cmd, log: logf, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(a.exited)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		logf.Close()
		return nil, nil, fmt.Errorf("start the agent: %w", err)
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, a.stop())
		}
	}()
	fmt.Fprintf(progress, "overhead: agent started (pid %d); waiting for its API at %s\n", cmd.Process.Pid, sock)
	client := api.NewClient(sock)
	deadline := time.Now().Add(60 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.List(lctx)
		cancel()
		if err == nil {
			return a, client, nil
		}
		select {
		case <-a.exited:
			client.Close()
			b, _ := os.ReadFile(logf.Name())
			return nil, nil, fmt.Errorf("the agent exited before its API answered: %s", strings.TrimSpace(string(b)))
		case <-ctx.Done():
			client.Close()
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			client.Close()
			return nil, nil, fmt.Errorf("the agent's API did not answer within 60 s: %w", err)
		}
	}
}
