package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// nginxConf is the include the sidecar writes for nginx: one
// ssl_session_ticket_key directive per key, in serving order, naming the
// key's file, nginx.<id>.key. nginx reads the files only when it loads its
// configuration, keeps every key listed for decryption, and encrypts with
// the first.
const nginxConf = "nginx-ticket-keys.conf"

const (
	nginxMaster = "nginx: master process"
	nginxWorker = "nginx: worker process"
)

// nginx feeds an nginx in the same pod, whose processes the sidecar sees
// (shareProcessNamespace: true): it writes the key files and the include,
// and reloads nginx gracefully (SIGHUP to the master, which starts new
// workers with the new configuration and lets the old ones finish their
// connections). The key files are named by key id, so that the include,
// written last, switches from one complete set to the next.
type nginx struct {
	// dir is the shared directory as the sidecar sees it; serverDir as nginx
	// does, for the paths in the include.
	dir, serverDir string
	pidFile        string
	// check, if set, runs before each reload (nginx -t, where the sidecar
	// can run nginx); a failure skips the reload.
	check []string
	probe *prober
	// window is --reload-window: how long a key nginx need not hold yet
	// may wait for the next reload, and how early a key that expires soon
	// may go with one (see planReload).
	window time.Duration

	// master is the master last reloaded, and loaded the include it was
	// reloaded with, naming the keys held (in nginx's order).
	master process
	loaded []byte
	held   []string
	// seen is when the sidecar first saw each key of the ring, for the
	// window.
	seen map[string]time.Time
}

// reload is planReload's decision.
type reload struct {
	// now reports whether nginx must be reloaded now; keys are what it
	// then loads, or else what it holds (keys of the ring, in order).
	now  bool
	keys []agent.TicketKey
	// wake is when a key left waiting is due, if any: the sidecar applies
	// again then.
	wake time.Time
}

// planReload decides at now what nginx loads, given the ring's keys (in
// serving order, the active key first), the ids nginx holds (nil if
// nothing is known to be loaded) and when each key was first seen. Each
// reload closes the idle keep-alive connections of nginx's old workers, so
// nginx is reloaded only when it must, and takes every change due soon in
// that one reload:
//   - at once when the key it encrypts with is no longer the active one
//     (a key activated: nginx must not encrypt with its predecessor past its
//     time), or when it holds a key the ring no longer has (expired,
//     dropped, revoked);
//   - a key it does not hold yet (a new staged key: no pod encrypts with it
//     before activationDelay) waits up to window after it was first seen,
//     for a reload that something else requires, but never past window
//     before its activeFrom: a key that is or is about to be in use is
//     loaded at once;
//   - a key that expires within window is left out of any reload, rather
//     than costing one of its own at its expiresAt: it goes early, never
//     late.
//
// The order of the decrypt-only keys does not matter to nginx.
func planReload(now time.Time, window time.Duration, keys []agent.TicketKey, held []string, seen map[string]time.Time) reload {
	want := make([]agent.TicketKey, 0, len(keys))
	for i, k := range keys {
		if i == 0 || k.ExpiresAt.After(now.Add(window)) {
			want = append(want, k)
		}
	}
	must := len(held) == 0 || len(keys) == 0 || held[0] != keys[0].ID
	var wake time.Time
	for _, id := range held {
		must = must || !slices.ContainsFunc(keys, func(k agent.TicketKey) bool { return k.ID == id })
	}
	for _, k := range want {
		if slices.Contains(held, k.ID) {
			continue
		}
		due := seen[k.ID].Add(window)
		if at := k.ActiveFrom.Add(-window); at.Before(due) {
			due = at
		}
		if !now.Before(due) {
			must = true
		} else if wake.IsZero() || due.Before(wake) {
			wake = due
		}
	}
	if must {
		return reload{now: true, keys: want}
	}
	kept := make([]agent.TicketKey, 0, len(held))
	for _, id := range held {
		i := slices.IndexFunc(keys, func(k agent.TicketKey) bool { return k.ID == id })
		kept = append(kept, keys[i])
	}
	return reload{keys: kept, wake: wake}
}

func (n *nginx) apply(ctx context.Context, keys []agent.TicketKey) (applied, error) {
	now := time.Now()
	seen := make(map[string]time.Time, len(keys))
	for _, k := range keys {
		seen[k.ID] = now
		if t, ok := n.seen[k.ID]; ok {
			seen[k.ID] = t
		}
	}
	n.seen = seen
	// Without a master, the files are written all the same: nginx reads
	// them when it starts.
	master, noMaster := n.findMaster()
	held := n.held
	if noMaster != nil || master != n.master {
		held = nil // a new master: reload it, to know what it holds
	}
	plan := planReload(now, n.window, keys, held, seen)
	res, err := n.load(ctx, master, noMaster, plan.keys, plan.now)
	res.wake = plan.wake
	return res, err
}

// load writes the files of keys and, unless noMaster is set, reloads nginx
// with them if force is set or a file or the include changed.
func (n *nginx) load(ctx context.Context, master process, noMaster error, keys []agent.TicketKey, force bool) (applied, error) {
	var conf bytes.Buffer
	conf.WriteString("# Written by ringmaster-agent at every change of the ring; do not edit.\n# The first key encrypts new tickets; every key decrypts.\n")
	files := make([]file, 0, len(keys)+1)
	defer func() {
		for _, f := range files {
			clear(f.data)
		}
	}()
	for _, k := range keys {
		d := derive(k, keyring.FormatNginx)
		name := "nginx." + k.ID + ".key"
		files = append(files, file{name: name, data: d[:]})
		// The include names the keys and their order only, not their
		// states: a new epoch that publishes the same keys in the same
		// order (a staged key the agent already activated at its
		// activeFrom) writes the same include, and nginx is not reloaded,
		// since each reload closes the idle keep-alive connections of its
		// old workers (planReload decides which changes reload).
		fmt.Fprintf(&conf, "ssl_session_ticket_key %s;\n", filepath.Join(n.serverDir, name))
	}
	files = append(files, file{name: nginxConf, data: bytes.Clone(conf.Bytes())})
	changed, err := writeFiles(n.dir, files)
	if err == nil {
		// Only once the include no longer names them.
		err = removeStale(n.dir, "nginx.", ".key", files)
	}
	if err != nil {
		return applied{}, fail(causeWrite, "%w", err)
	}
	if noMaster != nil {
		return applied{}, noMaster
	}
	held := applied{held: ids(keys)}
	if !force && !changed && master == n.master && bytes.Equal(conf.Bytes(), n.loaded) {
		return held, nil
	}
	if err := n.checkFiles(ctx, files); err != nil {
		return applied{}, err
	}
	before, err := children(master, nginxWorker)
	if err != nil {
		return applied{}, fail(causeNoServer, "list nginx workers: %w", err)
	}
	if err := syscall.Kill(master.pid, syscall.SIGHUP); err != nil {
		return applied{}, fail(causeSignal, "signal the nginx master (pid %d): %w", master.pid, err)
	}
	// nginx starts new workers only if the new configuration loaded; if it
	// did not, its error log says why, and the old workers keep serving.
	// The old workers then go on with the connections they have, but stop
	// accepting: each renames itself "... is shutting down" just before it
	// closes its listening sockets. Until then a new connection may still
	// reach an old worker, and its old keys.
	for {
		now, err := children(master, nginxWorker)
		if err != nil {
			return applied{}, fail(causeNoServer, "list nginx workers: %w", err)
		}
		if switched(now, before) {
			break
		}
		select {
		case <-ctx.Done():
			return applied{}, fail(causeNotTaken, "nginx (pid %d) started no worker with the new configuration: see its error log", master.pid)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if n.probe != nil && len(keys) > 0 {
		d := derive(keys[0], keyring.FormatNginx)
		err := confirm(ctx, n.probe, d[:keyNameSize])
		clear(d[:])
		if err != nil {
			return applied{}, err
		}
	}
	n.master, n.loaded, n.held = master, bytes.Clone(conf.Bytes()), held.held
	held.took = true
	return held, nil
}

// findMaster returns the nginx master named by the pid file.
func (n *nginx) findMaster() (process, error) {
	b, err := os.ReadFile(n.pidFile)
	if err != nil {
		return process{}, fail(causeNoServer, "nginx is not running: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return process{}, fail(causeNoServer, "pid file %s holds no pid", n.pidFile)
	}
	p, ok := lookup(pid, nginxMaster)
	if !ok {
		// A stale pid file: nginx was killed, and the pid may be another
		// process's by now.
		return process{}, fail(causeNoServer, "pid %d of %s is not an nginx master process", pid, n.pidFile)
	}
	return p, nil
}

// checkFiles checks, before a reload, that every file reads back as
// written, and runs the check command.
func (n *nginx) checkFiles(ctx context.Context, files []file) error {
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(n.dir, f.name))
		same := err == nil && bytes.Equal(b, f.data)
		clear(b)
		if !same {
			return fail(causeCheck, "%s does not read back as written (%v)", f.name, err)
		}
	}
	if len(n.check) == 0 {
		return nil
	}
	out, err := exec.CommandContext(ctx, n.check[0], n.check[1:]...).CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fail(causeCheck, "%s: %v: %s", strings.Join(n.check, " "), err, lines[len(lines)-1])
	}
	return nil
}

// switched reports whether nginx has moved to new workers: one of now was
// not there before, and every worker from before that still runs is
// shutting down.
func switched(now, before map[process]string) bool {
	fresh := false
	for p, cmd := range now {
		_, old := before[p]
		fresh = fresh || !old
		if old && cmd == nginxWorker {
			return false
		}
	}
	return fresh
}
