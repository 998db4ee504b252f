package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// process is a process seen in /proc: its id, and the start time the
// kernel gave it (in clock ticks since boot), which tells it from a later
// process that reuses the id.
type process struct {
	pid   int
	start uint64
}

// stat returns the fields of /proc/PID/stat from the third (state) on, and
// the command line. The second field, the command name in parentheses, may
// itself hold spaces and parentheses, so the split starts after its last
// ')'.
func stat(pid int) (fields []string, cmdline string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, "", err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, "", errors.New("malformed /proc stat")
	}
	fields = strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return nil, "", errors.New("malformed /proc stat")
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, "", err
	}
	return fields, strings.TrimRight(strings.ReplaceAll(string(cmd), "\x00", " "), " "), nil
}

// lookup returns pid as a process if its command line starts with prefix.
func lookup(pid int, prefix string) (process, bool) {
	f, cmd, err := stat(pid)
	if err != nil || !strings.HasPrefix(cmd, prefix) || f[0] == "Z" {
		return process{}, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64) // field 22
	return process{pid: pid, start: start}, err == nil
}

// children returns the running children of parent whose command line
// starts with prefix, with their command lines. It reads the kernel's list
// of parent's children where it keeps one (CONFIG_PROC_CHILDREN; parent's
// children are all its main thread's, as nginx's master forks from it),
// and looks through every process otherwise.
func children(parent process, prefix string) (map[process]string, error) {
	var pids []int
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", parent.pid, parent.pid)); err == nil {
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	} else {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	out := map[process]string{}
	want := strconv.Itoa(parent.pid)
	for _, pid := range pids {
		f, cmd, err := stat(pid)
		if err != nil || f[1] != want || f[0] == "Z" || !strings.HasPrefix(cmd, prefix) {
			continue
		}
		if start, err := strconv.ParseUint(f[19], 10, 64); err == nil {
			out[process{pid: pid, start: start}] = cmd
		}
	}
	return out, nil
}
