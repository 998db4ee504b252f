package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// fileMode is the mode of every file the sidecar writes: the server reads
// them as the sidecar's user, or through a group the pod shares (fsGroup).
const fileMode = 0o640

// file is one file to write into the shared directory.
type file struct {
	name string
	data []byte
}

// writeFiles writes files into dir in the order given, each atomically
// (written under a temporary name, then renamed over its own), skipping
// those whose content is already there. It returns whether any file
// changed. Readers never see a partly written file; the order lets the
// last file (an include that names the others) commit the set.
func writeFiles(dir string, files []file) (changed bool, err error) {
	for _, f := range files {
		wrote, err := writeFile(dir, f.name, f.data)
		if err != nil {
			return changed, err
		}
		changed = changed || wrote
	}
	return changed, nil
}

// writeFile writes data to dir/name unless it holds data already.
func writeFile(dir, name string, data []byte) (bool, error) {
	path := filepath.Join(dir, name)
	if old, err := os.ReadFile(path); err == nil {
		same := bytes.Equal(old, data)
		clear(old)
		if same {
			return false, nil
		}
	}
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	// A leading dot and no known suffix: no glob a server's configuration
	// uses (nginx's include *.conf) matches a file being written.
	tmp := filepath.Join(dir, "."+name+".tmp-"+hex.EncodeToString(suffix[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", name, err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, fileMode)); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return false, fmt.Errorf("write %s: %w", name, err)
	}
	return true, nil
}

// removeStale removes the files of dir named prefix*suffix that keep does
// not list, and the temporary files a killed sidecar left behind.
func removeStale(dir, prefix, suffix string, keep []file) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	kept := map[string]bool{}
	for _, f := range keep {
		kept[f.name] = true
	}
	var errs []error
	for _, e := range entries {
		n := e.Name()
		ours := strings.HasPrefix(n, prefix) && strings.HasSuffix(n, suffix) && !kept[n]
		leftover := strings.HasPrefix(n, "."+prefix) && strings.Contains(n, ".tmp-")
		if !e.Type().IsRegular() || (!ours && !leftover) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
