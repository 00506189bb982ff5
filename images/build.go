package images

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DefaultMirror is the Debian mirror recipes use unless DESKFARM_MIRROR is set.
const DefaultMirror = "http://deb.debian.org/debian"

// Build parameters.
const (
	tailLines       = 50               // log lines kept for a failure's error
	maxTailLine     = 400              // bytes kept of each of those lines
	defaultTick     = 15 * time.Second // "still working" interval
	killGrace       = 10 * time.Second // SIGTERM to SIGKILL on cancellation
	drainTimeout    = 5 * time.Second  // wait for the output pipe after build.sh exits
	buildLockFile   = "lock"           // in a build directory, held while it builds
	lockPollEvery   = 250 * time.Millisecond
	deadBuildMinAge = 10 * time.Minute // a build dir without a lock file is dead after this
)

// Build builds recipe name and returns the cached image. Unless force, an
// image already cached for the current hash is returned as is. A second
// Build of the same recipe waits for the first and then returns its result.
//
// build.sh runs in its own process group in a temporary directory beside
// the cache entry; on failure or when ctx ends the group is killed, the
// temporary directory removed (after unmounting anything the recipe left
// mounted in it) and the cache left as it was. A forced rebuild replaces
// the entry atomically; overlays made on the old disk.qcow2 then see the
// new one, so do it only when no VM uses the image.
func (s *Store) Build(ctx context.Context, name string, force bool) (Image, error) {
	if err := s.checkName(name); err != nil {
		return Image{}, fmt.Errorf("build image: %w", err)
	}
	if err := context.Cause(ctx); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	log := s.log().With("op", "build", "image", name)
	if err := os.MkdirAll(s.imagesDir(), 0o755); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	root, err := os.MkdirTemp(s.imagesDir(), "."+name+".build-")
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	defer func() {
		if err := removeTree(root); err != nil {
			log.Warn("could not remove build directory", "dir", root, "err", err)
		}
	}()
	// Held for the whole build: Prune and List tell live builds from dead ones by it.
	rootLock, err := lockFile(context.Background(), filepath.Join(root, buildLockFile), nil)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	defer rootLock()

	dirs := buildDirs{
		root:   root,
		recipe: filepath.Join(root, "recipe"),
		work:   filepath.Join(root, "work"),
		out:    filepath.Join(root, "out"),
	}
	for _, d := range []string{dirs.recipe, dirs.work, dirs.out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return Image{}, fmt.Errorf("build image %s: %w", name, err)
		}
	}
	if err := extractRecipe(s.fsys(), name, dirs.recipe); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	base, err := recipeBase(s.fsys(), name)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	var baseEnv []string
	if base != "" {
		dir := filepath.Join(root, "base")
		if err := extractRecipe(s.fsys(), base, dir); err != nil {
			return Image{}, fmt.Errorf("build image %s: base: %w", name, err)
		}
		baseEnv = []string{"DESKFARM_BASE_DIR=" + dir}
	}
	prep, err := s.prepare(ctx, name, dirs.work)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	hash, err := hashRecipe(s.fsys(), name, s.hashInputs(name))
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	log = log.With("hash", hash[:12])

	if !force {
		if img, err := s.load(name, hash); err == nil {
			log.Debug("image up to date", "dir", img.Dir)
			s.progressf("[%s] up to date: %s", name, img.Dir)
			return img, nil
		}
	}
	unlock, err := lockFile(ctx, filepath.Join(s.imagesDir(), "."+entryName(name, hash)+".lock"), func() {
		log.Info("waiting for another build of the same recipe")
		s.progressf("[%s] waiting for another build of %s to finish", name, entryName(name, hash))
	})
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: lock: %w", name, err)
	}
	defer unlock()
	if !force {
		// The build we waited for may have made it.
		if img, err := s.load(name, hash); err == nil {
			s.progressf("[%s] built by another process: %s", name, img.Dir)
			return img, nil
		}
	}
	return s.run(ctx, log, name, hash, dirs, append(baseEnv, prep.Env...))
}

// buildDirs are the parts of a temporary build directory.
type buildDirs struct {
	root   string // .<name>.build-N, beside the cache entries
	recipe string // the recipe's files (DESKFARM_RECIPE_DIR)
	work   string // build.sh's current directory
	out    string // build.sh's OUTDIR; renamed to the cache entry on success
}

// run runs build.sh and installs its output as the cache entry of hash.
func (s *Store) run(ctx context.Context, log *slog.Logger, name, hash string, dirs buildDirs, env []string) (Image, error) {
	final := s.imageDir(name, hash)
	logPath := s.logPath(name, hash)
	if err := os.MkdirAll(s.logsDir(), 0o755); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	defer logf.Close()

	prog := newProgress(name, s.Progress, log, time.Now)
	fmt.Fprintf(logf, "# deskfarm image build %s, recipe hash %s, started %s\n", name, hash, time.Now().UTC().Format(time.RFC3339))
	s.progressf("[%s] building %s (log %s)", name, entryName(name, hash), logPath)
	log.Info("image build started", "dir", final, "log", logPath)

	script := filepath.Join(dirs.recipe, buildScript)
	cmd := exec.Command("bash", script, dirs.out)
	cmd.Dir = dirs.work
	cmd.Env = append(os.Environ(), "DESKFARM_RECIPE_DIR="+dirs.recipe, "DESKFARM_MIRROR="+mirror())
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		return Image{}, fmt.Errorf("build image %s: start bash %s: %w", name, script, err)
	}
	pw.Close()
	pgid := cmd.Process.Pid

	lines := &tail{max: tailLines}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		readOutput(pr, logf, lines, prog, log)
	}()
	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()

	every := s.tick
	if every <= 0 {
		every = defaultTick
	}
	ticker := time.NewTicker(min(every, time.Second))
	defer ticker.Stop()
	var waitErr error
	var killTimer *time.Timer
	cancelled, ctxDone := false, ctx.Done()
wait:
	for {
		select {
		case waitErr = <-waitDone:
			break wait
		case <-ticker.C:
			prog.Tick(every)
		case <-ctxDone:
			ctxDone, cancelled = nil, true
			log.Info("image build cancelled, stopping build.sh", "pgid", pgid, "cause", context.Cause(ctx))
			s.progressf("[%s] cancelled, stopping the build", name)
			// SIGTERM first so build.sh's traps unmount what it mounted.
			syscall.Kill(-pgid, syscall.SIGTERM)
			killTimer = time.AfterFunc(killGrace, func() { syscall.Kill(-pgid, syscall.SIGKILL) })
		}
	}
	if killTimer != nil {
		killTimer.Stop()
	}
	// Whatever is left in the group (say a daemon a postinst started) would
	// keep the output pipe open and the build directory busy.
	syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-readDone:
	case <-time.After(drainTimeout):
		pr.Close()
		<-readDone
	}
	steps := prog.Finish()
	elapsed := prog.Elapsed()
	fmt.Fprintf(logf, "# finished after %s: %v\n", fmtDuration(elapsed), exitText(waitErr))

	if cancelled {
		err := fmt.Errorf("build image %s: %w (log %s)", name, context.Cause(ctx), logPath)
		log.Info("image build finished", "seconds", roundSeconds(elapsed), "err", err)
		return Image{}, err
	}
	if waitErr != nil {
		tl := lines.Lines()
		err := fmt.Errorf("build image %s: %w: bash build.sh: %v after %s; log %s\n--- last %d lines ---\n%s",
			name, ErrBuildFailed, exitText(waitErr), fmtDuration(elapsed), logPath, len(tl), strings.Join(tl, "\n"))
		s.progressf("[%s] failed after %s: %v (log %s)", name, fmtDuration(elapsed), exitText(waitErr), logPath)
		log.Error("image build failed", "seconds", roundSeconds(elapsed), "exit", exitText(waitErr), "log", logPath)
		return Image{}, err
	}

	sizes, err := finishOutput(dirs.out)
	if err != nil {
		err = fmt.Errorf("build image %s: %w: %w (log %s)", name, ErrBuildFailed, err, logPath)
		log.Error("image build failed", "err", err)
		return Image{}, err
	}
	m := manifest{
		Name:         name,
		Hash:         hash,
		BuildID:      newBuildID(),
		BuiltAt:      time.Now().UTC().Truncate(time.Second),
		BuildSeconds: roundSeconds(elapsed),
		Sizes:        sizes,
		Steps:        steps,
	}
	if err := writeManifest(dirs.out, m); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	if err := installDir(dirs.out, final); err != nil {
		return Image{}, fmt.Errorf("build image %s: install %s: %w", name, final, err)
	}
	img, err := s.load(name, hash)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: after install: %w", name, err)
	}
	s.progressf("[%s] built in %s: %s (%s)", name, fmtDuration(elapsed), img.Dir, FormatSize(img.SizeBytes))
	log.Info("image build finished", "dir", img.Dir, "seconds", roundSeconds(elapsed), "bytes", img.SizeBytes)
	return img, nil
}

// readOutput copies build.sh's output to the log file and the tail and
// turns step lines into progress.
func readOutput(r io.Reader, logf io.Writer, lines *tail, prog *progress, log *slog.Logger) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			text := strings.TrimRight(line, "\r\n")
			io.WriteString(logf, text+"\n")
			if st, ok := parseStep(text); ok {
				prog.Step(st)
			}
			if len(text) > maxTailLine {
				text = text[:maxTailLine] + "..."
			}
			lines.Add(text)
			log.Debug("build output", "line", text)
		}
		if err != nil {
			return
		}
	}
}

// exitText describes how build.sh ended.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// mirror is the Debian mirror passed to recipes.
func mirror() string {
	if m := os.Getenv("DESKFARM_MIRROR"); m != "" {
		return m
	}
	return DefaultMirror
}

// finishOutput checks build.sh's output, makes it read-only for QEMU
// (disk 0444, other files 0644, directory 0755) and flushes it to disk.
func finishOutput(out string) (map[string]int64, error) {
	sizes := map[string]int64{}
	for _, f := range outputFiles {
		p := filepath.Join(out, f)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("build.sh did not write %s", f)
		}
		if !st.Mode().IsRegular() || st.Size() == 0 {
			return nil, fmt.Errorf("build.sh wrote an empty or irregular %s", f)
		}
		mode := os.FileMode(0o644)
		if f == DiskFile {
			mode = 0o444
		}
		if err := os.Chmod(p, mode); err != nil {
			return nil, err
		}
		if err := syncFile(p); err != nil {
			return nil, err
		}
		sizes[f] = st.Size()
	}
	cmdline, err := os.ReadFile(filepath.Join(out, CmdlineFile))
	if err != nil {
		return nil, err
	}
	if line := strings.TrimSpace(string(cmdline)); line == "" || strings.Contains(line, "\n") {
		return nil, fmt.Errorf("build.sh wrote a %s that is not one line", CmdlineFile)
	}
	if err := os.Chmod(out, 0o755); err != nil {
		return nil, err
	}
	return sizes, nil
}

func writeManifest(dir string, m manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(dir, ManifestFile)
	if err := os.WriteFile(p, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	if err := syncFile(p); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return syncFile(dir)
}

// installDir renames the finished build dir to final. When final exists
// (a forced rebuild, or a broken entry) the two are exchanged atomically,
// so final is never missing; the old entry is left at dir for the caller
// to remove.
func installDir(dir, final string) error {
	err := os.Rename(dir, final)
	if errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
		err = exchange(dir, final)
	}
	if err != nil {
		return err
	}
	return syncFile(filepath.Dir(final))
}
