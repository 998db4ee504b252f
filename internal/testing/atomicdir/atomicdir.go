// Package atomicdir reproduces, step for step, the kubelet's AtomicWriter
// (k8s.io/kubernetes/pkg/volume/util/atomic_writer.go, v1.37): the algorithm
// that updates Secret, ConfigMap and projected volumes inside running pods.
//
// No kubelet runs in this repository's tests, yet the agent must survive
// exactly what a kubelet does to its directory, so tests and the end-to-end
// harness write through this package instead of writing files directly. The
// resulting layout is:
//
//	<dir>/..2026_11_30_01_02_03.123456789/ticketkeys.json   the real files
//	<dir>/..data -> ..2026_11_30_01_02_03.123456789         swapped by rename
//	<dir>/ticketkeys.json -> ..data/ticketkeys.json          created once
//
// The only departures from the kubelet are the ones a test needs: no klog,
// no file ownership (FsUser), no setPerms hook, and errors that say which
// step failed.
package atomicdir

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

const (
	// DataDirName is the symlink that points at the current timestamped
	// directory. Readers resolve it once to read a consistent set of files.
	DataDirName = "..data"
	// NewDataDirName is the symlink created beside DataDirName and renamed
	// over it; rename(2) is what makes the swap atomic.
	NewDataDirName = "..data_tmp"

	maxFileNameLength = 255
	maxPathLength     = 4096
)

// File is the content and mode of one projected file, like the kubelet's
// FileProjection.
type File struct {
	// Data is the file's content.
	Data []byte
	// Mode is the file's permission bits; zero means 0644, the default
	// mode of Secret and projected volumes.
	Mode fs.FileMode
}

// Writer projects payloads into one target directory. Like the kubelet's,
// it offers no concurrency guarantee: callers serialise Write calls.
type Writer struct {
	dir string
}

// NewWriter returns a Writer for dir, which must exist.
func NewWriter(dir string) (*Writer, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	return &Writer{dir: dir}, nil
}

// Write projects payload, a map from relative path to file, into the
// writer's directory, in the kubelet's twelve steps:
//
//  1. validate the payload (relative paths, no ".." element, no leading "..");
//  2. read the ..data symlink to find the current timestamped directory;
//  3. walk it for paths the new payload no longer has;
//  4. skip the write when every file is unchanged and nothing was removed;
//  5. create a new timestamped directory ..YYYY_MM_DD_HH_MM_SS.<random>;
//  6. write the payload into it;
//  7. (the kubelet sets ownership here; not reproduced);
//  8. create the ..data_tmp symlink to the new directory;
//  9. rename ..data_tmp over ..data, the atomic step;
//  10. create the user-visible symlinks name -> ..data/name, once;
//  11. remove user-visible symlinks of paths that left the payload;
//  12. remove the previous timestamped directory.
func (w *Writer) Write(payload map[string]File) error {
	// (1)
	clean, err := validatePayload(payload)
	if err != nil {
		return err
	}

	// (2)
	dataDirPath := filepath.Join(w.dir, DataDirName)
	oldTsDir, err := os.Readlink(dataDirPath)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("read link for data directory: %w", err)
		}
		oldTsDir = ""
	}
	oldTsPath := filepath.Join(w.dir, oldTsDir)

	var toRemove map[string]struct{}
	shouldWrite := true
	if oldTsDir != "" {
		// (3)
		toRemove, err = pathsToRemove(clean, oldTsPath)
		if err != nil {
			return fmt.Errorf("determine user-visible files to remove: %w", err)
		}
		// (4)
		should, err := shouldWritePayload(clean, oldTsPath)
		if err != nil {
			return fmt.Errorf("determine whether payload should be written: %w", err)
		}
		if !should && len(toRemove) == 0 {
			// Up to date; still make sure the visible symlinks exist
			// (kubernetes/kubernetes#121472), and keep the data directory.
			shouldWrite = false
			oldTsDir = ""
		}
	}

	if shouldWrite {
		// (5)
		tsDir, err := w.newTimestampDir()
		if err != nil {
			return err
		}
		tsDirName := filepath.Base(tsDir)

		// (6)
		if err := writePayloadToDir(clean, tsDir); err != nil {
			return fmt.Errorf("write payload to %s: %w", tsDir, err)
		}

		// (7) ownership: not reproduced.

		// (8)
		newDataDirPath := filepath.Join(w.dir, NewDataDirName)
		if err := os.Symlink(tsDirName, newDataDirPath); err != nil {
			_ = os.RemoveAll(tsDir)
			return fmt.Errorf("create symlink for atomic update: %w", err)
		}

		// (9)
		if runtime.GOOS == "windows" {
			_ = os.Remove(dataDirPath)
			err = os.Symlink(tsDirName, dataDirPath)
			_ = os.Remove(newDataDirPath)
		} else {
			err = os.Rename(newDataDirPath, dataDirPath)
		}
		if err != nil {
			_ = os.Remove(newDataDirPath)
			_ = os.RemoveAll(tsDir)
			return fmt.Errorf("rename symlink for data directory: %w", err)
		}
	}

	// (10)
	if err := w.createUserVisibleFiles(clean); err != nil {
		return fmt.Errorf("create visible symlinks in %s: %w", w.dir, err)
	}

	// (11)
	if err := w.removeUserVisiblePaths(toRemove); err != nil {
		return fmt.Errorf("remove old visible symlinks: %w", err)
	}

	// (12)
	if oldTsDir != "" {
		if err := os.RemoveAll(oldTsPath); err != nil {
			return fmt.Errorf("remove old data directory %s: %w", oldTsDir, err)
		}
	}
	return nil
}

func validatePayload(payload map[string]File) (map[string]File, error) {
	clean := make(map[string]File, len(payload))
	for k, f := range payload {
		if err := validatePath(k); err != nil {
			return nil, err
		}
		clean[filepath.Clean(k)] = f
	}
	return clean, nil
}

// validatePath refuses what the kubelet refuses: empty or absolute paths,
// over-long paths or names, a ".." element, and a first element starting
// with "..", the prefix the writer reserves for itself.
func validatePath(p string) error {
	if p == "" {
		return fmt.Errorf("invalid path: must not be empty: %q", p)
	}
	if path.IsAbs(p) {
		return fmt.Errorf("invalid path: must be relative path: %s", p)
	}
	if len(p) > maxPathLength {
		return fmt.Errorf("invalid path: must be less than or equal to %d characters", maxPathLength)
	}
	items := strings.Split(p, string(os.PathSeparator))
	for _, item := range items {
		if item == ".." {
			return fmt.Errorf("invalid path: must not contain '..': %s", p)
		}
		if len(item) > maxFileNameLength {
			return fmt.Errorf("invalid path: filenames must be less than or equal to %d characters", maxFileNameLength)
		}
	}
	if strings.HasPrefix(items[0], "..") && len(items[0]) > 2 {
		return fmt.Errorf("invalid path: must not start with '..': %s", p)
	}
	return nil
}

func shouldWritePayload(payload map[string]File, oldTsDir string) (bool, error) {
	for p, f := range payload {
		should, err := shouldWriteFile(filepath.Join(oldTsDir, p), f.Data)
		if err != nil || should {
			return should, err
		}
	}
	return false, nil
}

func shouldWriteFile(p string, content []byte) (bool, error) {
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	onDisk, err := os.ReadFile(p)
	if err != nil {
		return false, err
	}
	return !bytes.Equal(content, onDisk), nil
}

// pathsToRemove returns the paths under the old timestamped directory that
// are neither in payload nor a parent directory of a payload path.
func pathsToRemove(payload map[string]File, oldTsDir string) (map[string]struct{}, error) {
	paths := map[string]struct{}{}
	err := filepath.Walk(oldTsDir, func(p string, _ os.FileInfo, _ error) error {
		rel := strings.TrimPrefix(p, oldTsDir)
		rel = strings.TrimPrefix(rel, string(os.PathSeparator))
		if rel != "" {
			paths[rel] = struct{}{}
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for file := range payload {
		for sub := file; sub != ""; {
			delete(paths, sub)
			sub, _ = filepath.Split(sub)
			sub = strings.TrimSuffix(sub, string(os.PathSeparator))
		}
	}
	return paths, nil
}

// newTimestampDir creates the directory the kubelet would: MkdirTemp with
// the UTC time as prefix, so the name ends in MkdirTemp's random digits.
func (w *Writer) newTimestampDir() (string, error) {
	tsDir, err := os.MkdirTemp(w.dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return "", fmt.Errorf("create timestamped directory: %w", err)
	}
	// As the kubelet does: 0755 whatever the umask, so that group and other
	// can traverse it.
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return "", fmt.Errorf("set mode on timestamped directory: %w", err)
	}
	return tsDir, nil
}

func writePayloadToDir(payload map[string]File, dir string) error {
	for p, f := range payload {
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), os.ModePerm); err != nil {
			return err
		}
		if err := os.WriteFile(full, f.Data, mode); err != nil {
			return err
		}
		// WriteFile applies the umask; the kubelet wants the exact mode.
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
	}
	return nil
}

// createUserVisibleFiles creates "name -> ..data/name" for the first path
// element of every payload path that has no link yet. Links are never
// rewritten: they resolve through ..data, so the rename alone moves them.
func (w *Writer) createUserVisibleFiles(payload map[string]File) error {
	for p := range payload {
		link, _, _ := strings.Cut(p, string(os.PathSeparator))
		visible := filepath.Join(w.dir, link)
		if _, err := os.Readlink(visible); err != nil && errors.Is(err, fs.ErrNotExist) {
			if err := os.Symlink(filepath.Join(DataDirName, link), visible); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeUserVisiblePaths removes top-level links only; nested paths vanish
// with the old timestamped directory.
func (w *Writer) removeUserVisiblePaths(paths map[string]struct{}) error {
	var last error
	for p := range paths {
		if strings.Contains(p, string(os.PathSeparator)) {
			continue
		}
		if err := os.Remove(filepath.Join(w.dir, p)); err != nil {
			last = err
		}
	}
	return last
}
