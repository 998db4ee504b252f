package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringmaster-io/ringmaster/internal/echring"
	"github.com/ringmaster-io/ringmaster/internal/keyring"
	"github.com/ringmaster-io/ringmaster/pkg/agent"
)

// TestSymlinksStayInVolume: no symlink, at any hop, leads a read out of
// the directory. ..data must name a directory beside it, itself no link;
// a file (or a link of a file's chain) pointing out is refused, with an
// error naming the link; links that stay inside are followed.
func TestSymlinksStayInVolume(t *testing.T) {
	p := newPKI(t)
	cert := p.valid()
	s := newSchedule(time.Now())
	const gen = "..2026_01_01_00_00_00.1"
	// A valid ring and certificate outside the volume: what a followed
	// link would serve.
	elsewhere := t.TempDir()
	for name, data := range map[string][]byte{keyring.FileName: s.ring(t, 9), "tls.crt": cert.crt, "tls.key": cert.key} {
		if err := os.WriteFile(filepath.Join(elsewhere, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	outside := func(name string) string { return filepath.Join(elsewhere, name) }

	// relative marks a link written as the relative path from its
	// directory to what follows.
	const relative = "relative:"
	type entry struct{ name, file, link string } // one of file (content key) or link
	kubelet := func(extra ...entry) []entry {
		return append([]entry{
			{name: gen, file: "dir"},
			{name: "..data", link: gen},
			{name: keyring.FileName, link: "..data/" + keyring.FileName},
			{name: "tls.crt", link: "..data/tls.crt"},
			{name: "tls.key", link: "..data/tls.key"},
		}, extra...)
	}
	tests := []struct {
		name    string
		entries []entry
		want    error  // nil: taken
		reason  string // in the error
		epoch   int64  // when taken
	}{
		{name: "the kubelet's layout", entries: kubelet(
			entry{name: gen + "/" + keyring.FileName, file: "ring"}, entry{name: gen + "/tls.crt", file: "crt"}, entry{name: gen + "/tls.key", file: "key"}),
			epoch: 1},
		{name: "..data through a second link out of the directory", entries: []entry{
			{name: "..hop", link: elsewhere}, {name: "..data", link: "..hop"}},
			want: agent.ErrDirectory, reason: `..data points to "..hop", itself a symlink`},
		{name: "..data through a second link inside the directory", entries: []entry{
			{name: gen, file: "dir"}, {name: gen + "/" + keyring.FileName, file: "ring"},
			{name: "..hop", link: gen}, {name: "..data", link: "..hop"}},
			want: agent.ErrDirectory, reason: "itself a symlink"},
		{name: "..data absolute", entries: []entry{{name: "..data", link: elsewhere}},
			want: agent.ErrDirectory, reason: "not to an entry of"},
		{name: "..data climbing out", entries: []entry{{name: "..data", link: "../" + filepath.Base(elsewhere)}},
			want: agent.ErrDirectory, reason: "not to an entry of"},
		{name: "..data to a file", entries: []entry{{name: gen + "f", file: "ring"}, {name: "..data", link: gen + "f"}},
			want: agent.ErrDirectory, reason: "not a directory"},
		{name: "ring in the generation linked out", entries: kubelet(
			entry{name: gen + "/" + keyring.FileName, link: outside(keyring.FileName)}, entry{name: gen + "/tls.crt", file: "crt"}, entry{name: gen + "/tls.key", file: "key"}),
			want: agent.ErrTicketKeys, reason: `"` + gen + `/ticketkeys.json" is a symlink to`},
		{name: "private key in the generation linked out", entries: kubelet(
			entry{name: gen + "/" + keyring.FileName, file: "ring"}, entry{name: gen + "/tls.crt", file: "crt"}, entry{name: gen + "/tls.key", link: outside("tls.key")}),
			want: agent.ErrCertificate, reason: "tls.key\" is a symlink to"},
		{name: "ring linked out at the second hop", entries: kubelet(
			entry{name: gen + "/hop", link: relative + outside(keyring.FileName)},
			entry{name: gen + "/" + keyring.FileName, link: "hop"}, entry{name: gen + "/tls.crt", file: "crt"}, entry{name: gen + "/tls.key", file: "key"}),
			want: agent.ErrTicketKeys, reason: `"` + gen + `/hop" is a symlink to`},
		{name: "..data to a directory that does not exist", entries: []entry{{name: "..data", link: gen}},
			want: agent.ErrDirectory, reason: `..data points to "` + gen + `", which does not exist`},
		{name: "ring in the generation a symlink to nothing", entries: kubelet(
			entry{name: gen + "/" + keyring.FileName, link: "gone.json"}, entry{name: gen + "/tls.crt", file: "crt"}, entry{name: gen + "/tls.key", file: "key"}),
			want: agent.ErrTicketKeys, reason: `"` + gen + `/ticketkeys.json" is a symlink to "gone.json", which does not exist`},
		{name: "ring gone from the generation, its visible link left", entries: kubelet(
			entry{name: gen + "/tls.crt", file: "crt"}, entry{name: gen + "/tls.key", file: "key"}),
			want: agent.ErrTicketKeys, reason: `"ticketkeys.json" is a symlink to "..data/ticketkeys.json", which does not exist`},
		{name: "plain directory, echkeys.json a symlink to nothing", entries: []entry{
			{name: keyring.FileName, file: "ring"}, {name: "tls.crt", file: "crt"}, {name: "tls.key", file: "key"}, {name: echring.FileName, link: "gone.json"}},
			want: agent.ErrECHKeys, reason: `"echkeys.json" is a symlink to "gone.json", which does not exist`},
		{name: "ring linked inside the volume", entries: kubelet(
			entry{name: "..other", file: "dir"}, entry{name: "..other/" + keyring.FileName, file: "ring"},
			entry{name: gen + "/" + keyring.FileName, link: "../..other/" + keyring.FileName}, entry{name: gen + "/tls.crt", file: "crt"}, entry{name: gen + "/tls.key", file: "key"}),
			epoch: 1},
		{name: "plain directory, ring linked out", entries: []entry{
			{name: keyring.FileName, link: outside(keyring.FileName)}, {name: "tls.crt", file: "crt"}, {name: "tls.key", file: "key"}},
			want: agent.ErrTicketKeys, reason: `"ticketkeys.json" is a symlink to`},
		{name: "plain directory, ring linked inside", entries: []entry{
			{name: "sub", file: "dir"}, {name: "sub/" + keyring.FileName, file: "ring"},
			{name: keyring.FileName, link: "sub/" + keyring.FileName}, {name: "tls.crt", file: "crt"}, {name: "tls.key", file: "key"}},
			epoch: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			content := map[string][]byte{"ring": s.ring(t, 1), "crt": cert.crt, "key": cert.key}
			for _, e := range tt.entries {
				path := filepath.Join(dir, e.name)
				var err error
				switch {
				case strings.HasPrefix(e.link, relative):
					var rel string
					if rel, err = filepath.Rel(filepath.Dir(path), strings.TrimPrefix(e.link, relative)); err == nil {
						err = os.Symlink(rel, path)
					}
				case e.link != "":
					err = os.Symlink(e.link, path)
				case e.file == "dir":
					err = os.Mkdir(path, 0o755)
				default:
					err = os.WriteFile(path, content[e.file], 0o600)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			a, err := agent.New(agent.Options{Dir: dir, Require: agent.TicketKeys | agent.Certificate, Clock: newFakeClock(s.t0)})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("New = %v, want the files taken", err)
				}
				if st := a.Status(); st.Epoch != tt.epoch {
					t.Errorf("serving epoch %d, want %d", st.Epoch, tt.epoch)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("New = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("New = %v, want it to say %s", err, tt.reason)
			}
		})
	}
}

// TestDataDirToNothing: a running agent whose ..data comes to point at a
// directory that does not exist reports that (reason directory), not a
// read that raced a swap (inconsistent_read), and keeps serving.
func TestDataDirToNothing(t *testing.T) {
	s := newSchedule(time.Now())
	v := newVolume(t)
	v.write(s.ring(t, 1), nil, nil)
	var logs logBuffer
	a, err := agent.New(agent.Options{Dir: v.dir, Clock: newFakeClock(s.t0), Logger: logs.logger(), ResyncPeriod: noResync})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink("..2026_01_01_00_00_00.gone", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the directory error", func() bool {
		return metrics(t, a)["ringmaster_agent_reload_errors_total{reason=directory}"] >= 1
	})
	if got := metrics(t, a)["ringmaster_agent_reload_errors_total{reason=inconsistent_read}"]; got != 0 {
		t.Errorf("counted as %v inconsistent reads", got)
	}
	if st := a.Status(); st.Epoch != 1 || !strings.Contains(st.LastError, `..data points to "..2026_01_01_00_00_00.gone", which does not exist`) {
		t.Errorf("Status: epoch %d, LastError %q", st.Epoch, st.LastError)
	}
	if n := len(logs.records(t, map[string]string{"msg": rejectedMsg, "reason": "directory"})); n != 1 {
		t.Errorf("logged %d times, want 1", n)
	}
}
