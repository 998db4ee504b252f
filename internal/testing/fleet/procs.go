package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a process has to exit after SIGTERM before it is
// killed, unless Proc.Grace says otherwise.
const stopGrace = 15 * time.Second

// Supervisor starts the harness's processes and ends every one of them by its
// own process id. It records each pid with its start time, and those of the
// processes its children start (etcd and kube-apiserver under the control
// plane), so that Leftovers can tell, after Stop, whether any is still
// running without mistaking a reused pid for one of ours.
type Supervisor struct {
	dir string // where process logs go

	mu      sync.Mutex
	procs   []*Proc
	tracked []PID
}

// PID is a process id and the start time the kernel gave it (field 22 of
// /proc/PID/stat, in clock ticks since boot), which tells a live process
// from a later one that reuses its id.
type PID struct {
	Name  string
	ID    int
	start uint64
}

// NewSupervisor returns a supervisor writing process logs under dir.
func NewSupervisor(dir string) *Supervisor { return &Supervisor{dir: dir} }

// Proc is one child process: its stdout lines are kept for WaitLine and, with
// its stderr, written to a log file.
type Proc struct {
	Name string
	PID  int
	Log  string
	// Grace is how long Stop waits after SIGTERM before SIGKILL; zero means
	// stopGrace. Set it before Stop.
	Grace time.Duration

	sup  *Supervisor
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // Wait's result, set before done closes
	// killed is set by Kill: the process died by the harness's hand, which
	// Stop does not report.
	killed bool

	mu    sync.Mutex
	lines []string
	grew  chan struct{} // closed and replaced whenever a line arrives
}

// Start runs bin with args and env (added to the harness's own environment).
// The child is asked to receive SIGTERM if the harness itself dies first
// (Linux's parent-death signal), so that even a harness killed outright
// leaves nothing behind: the control plane, so signalled, stops its etcd and
// kube-apiserver.
func (s *Supervisor) Start(name, bin string, args []string, env ...string) (*Proc, error) {
	logPath, logFile, err := s.newLog(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logFile
	// A process group of its own keeps a terminal's Ctrl-C from reaching the
	// child behind the harness's back: the harness, told of it, stops each
	// process in turn.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// A pipe of our own rather than StdoutPipe: Wait must not wait for the
	// pipe to close, which a grandchild holding it open would delay.
	stdout, w, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close() // the child has its own copy
	if err != nil {
		stdout.Close()
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, PID: cmd.Process.Pid, Log: logPath, sup: s, cmd: cmd, done: make(chan struct{}), grew: make(chan struct{})}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	s.Track(name, p.PID)

	var writers sync.WaitGroup // of logFile
	writers.Go(func() {
		defer stdout.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			p.mu.Lock()
			p.lines = append(p.lines, line)
			close(p.grew)
			p.grew = make(chan struct{})
			p.mu.Unlock()
		}
		_, _ = io.Copy(logFile, stdout) // a line longer than the scanner's buffer
	})
	writers.Go(func() {
		p.err = cmd.Wait()
		close(p.done)
	})
	go func() {
		writers.Wait()
		logFile.Close()
	}()
	return p, nil
}

// newLog creates the log of a process named name: name.log, or name-2.log
// and on for a name started before (an operator restarted, a second
// cluster's control plane), so that no process writes over another's log.
func (s *Supervisor) newLog(name string) (string, *os.File, error) {
	for i := 1; ; i++ {
		path := filepath.Join(s.dir, name+".log")
		if i > 1 {
			path = filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", name, i))
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return path, f, err
	}
}

// Track records a process the harness did not start itself but must see
// gone, such as a child of one of its processes, and returns it.
func (s *Supervisor) Track(name string, pid int) (PID, bool) {
	start, err := startTime(pid)
	if err != nil {
		return PID{}, false // already gone
	}
	p := PID{Name: name, ID: pid, start: start}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tracked {
		if t.ID == p.ID && t.start == p.start {
			return t, true
		}
	}
	s.tracked = append(s.tracked, p)
	return p, true
}

// Tracked returns every process recorded so far.
func (s *Supervisor) Tracked() []PID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]PID(nil), s.tracked...)
}

// StopAll stops every process started, newest first (the fleet before the
// operator before the control plane), each by its own pid.
func (s *Supervisor) StopAll() error {
	s.mu.Lock()
	procs := append([]*Proc(nil), s.procs...)
	s.procs = nil
	s.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].Stop())
	}
	return errors.Join(errs...)
}

// Leftovers returns the recorded processes that are still running. After
// StopAll it should be empty; children of a stopped process may take a
// moment to go, so it waits up to stopGrace for them.
func (s *Supervisor) Leftovers() []PID {
	deadline := time.Now().Add(stopGrace)
	for {
		var alive []PID
		for _, p := range s.Tracked() {
			if p.Alive() {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			return alive
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Alive reports whether the process still runs: its pid exists with the
// same start time, and it is not a zombie awaiting its parent.
func (p PID) Alive() bool {
	start, err := startTime(p.ID)
	if err != nil || start != p.start {
		return false
	}
	st, err := statFields(p.ID)
	return err == nil && st[0] != "Z"
}

func (p PID) String() string { return fmt.Sprintf("%s (pid %d)", p.Name, p.ID) }

// WaitLine waits until the process prints a stdout line starting with prefix
// and returns the rest of that line. It fails if the process exits first.
func (p *Proc) WaitLine(ctx context.Context, prefix string) (string, error) {
	for seen := 0; ; {
		p.mu.Lock()
		lines, grew := p.lines, p.grew
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if rest, ok := strings.CutPrefix(lines[seen], prefix); ok {
				return rest, nil
			}
		}
		select {
		case <-grew:
		case <-p.done:
			return "", fmt.Errorf("%s exited (%v) before printing %q; log %s:\n%s", p.Name, p.err, prefix, p.Log, p.LogTail(20)) //nolint:errorlint // nil for exit 0: shown, not wrapped
		case <-ctx.Done():
			return "", fmt.Errorf("%s did not print %q: %w; log %s:\n%s", p.Name, prefix, ctx.Err(), p.Log, p.LogTail(20))
		}
	}
}

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process's own pid and waits for it, and sends
// SIGKILL if it has not exited after its Grace. A process that exited by
// itself is only reaped. An exit caused by the SIGTERM is not an error.
//
// The process's descendants are ended too, each by its own pid, should it
// leave them behind: hack/controlplane, stopped before it has installed its
// signal handler (while kube-apiserver starts), dies at once and orphans
// etcd and kube-apiserver. To list them without a race, the process is
// frozen with SIGSTOP while its tree is read, so that it cannot start one
// unseen, and only then terminated and continued.
func (p *Proc) Stop() error {
	var tree []PID
	if exited, _ := p.Exited(); !exited {
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		for _, pid := range descendants(p.PID) {
			if t, ok := p.sup.Track(commName(pid), pid); ok {
				tree = append(tree, t)
			}
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	defer endOrphans(tree)
	grace := p.Grace
	if grace == 0 {
		grace = stopGrace
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.Name, p.PID, grace)
	}
	if p.killed {
		return nil
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
		if exit.ExitCode() == 0 {
			return nil
		}
	}
	if p.err != nil {
		return fmt.Errorf("%s (pid %d): %w; log %s:\n%s", p.Name, p.PID, p.err, p.Log, p.LogTail(10))
	}
	return nil
}

// Kill ends the process with SIGKILL, by its pid, and reaps it: no chance
// to tidy up, as a container killed for running out of memory.
func (p *Proc) Kill() error {
	if exited, _ := p.Exited(); exited {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", p.Name, p.PID, err)
	}
	<-p.done
	p.killed = true
	return nil
}

// LogTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CPU returns the processor time the process has used so far, user plus
// system, from /proc/PID/stat.
func (p *Proc) CPU() (time.Duration, error) { return cpuTime(p.PID, false) }

// TreeCPU returns the processor time the process and its descendants have
// used so far: each one's user and system time, and that of its children
// that have exited (nginx's workers, once their master has reaped them).
func (p *Proc) TreeCPU() (time.Duration, error) {
	sum, err := cpuTime(p.PID, true)
	if err != nil {
		return 0, err
	}
	for _, pid := range descendants(p.PID) {
		if t, err := cpuTime(pid, true); err == nil { // it may have exited since
			sum += t
		}
	}
	return sum, nil
}

// clockTick is the unit of the times in /proc/PID/stat: USER_HZ, which Linux
// fixes at 100 for every architecture's user-space ABI.
const clockTick = 10 * time.Millisecond

// cpuTime reads a process's user and system time from /proc/PID/stat, and
// with children that of its children that have exited and been waited for.
func cpuTime(pid int, children bool) (time.Duration, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	// f[0] is field 3 (state); utime, stime, cutime and cstime are fields
	// 14 to 17.
	n := 2
	if children {
		n = 4
	}
	var ticks uint64
	for _, field := range f[11 : 11+n] {
		v, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

func startTime(pid int) (uint64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f[19], 10, 64) // field 22
}

// statFields returns the fields of /proc/PID/stat from the third (state) on:
// the second, the command name in parentheses, may itself hold spaces and
// parentheses, so the split starts after its last ')'.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	return parseStat(string(b))
}

func parseStat(s string) ([]string, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("malformed /proc stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return nil, fmt.Errorf("malformed /proc stat: %d fields after the command name", len(f))
	}
	return f, nil
}

// endOrphans waits for processes whose parent has exited to go by
// themselves, as a parent's clean stop makes them, and ends those that do
// not: SIGTERM by pid, then SIGKILL after stopGrace.
func endOrphans(procs []PID) {
	alive := func() []PID {
		var a []PID
		for _, p := range procs {
			if p.Alive() {
				a = append(a, p)
			}
		}
		return a
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(alive()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		left := alive()
		if len(left) == 0 {
			return
		}
		for _, p := range left {
			_ = syscall.Kill(p.ID, sig)
		}
		deadline := time.Now().Add(stopGrace)
		for len(alive()) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// descendants returns the pids of every process below pid: its children,
// theirs, and so on.
func descendants(pid int) []int {
	parent := map[int][]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := statFields(id)
		if err != nil {
			continue
		}
		ppid, _ := strconv.Atoi(f[1]) // field 4
		parent[ppid] = append(parent[ppid], id)
	}
	var out []int
	for queue := parent[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, parent[queue[0]]...)
	}
	return out
}

// commName is the command name of pid, for naming tracked children.
func commName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
