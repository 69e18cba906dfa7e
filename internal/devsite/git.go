package devsite

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// GitRepo is a local git repository a site deploys from: a bare repository (the "remote",
// file://Bare) and a working clone that commits and pushes to it.
type GitRepo struct{ Bare, Work string }

// NewGitRepo creates dir/git/site.git and dir/work holding the files of app (not its
// subdirectories), committed and pushed to branch main.
func NewGitRepo(dir, app string) (*GitRepo, error) {
	r := &GitRepo{Bare: filepath.Join(dir, "git", "site.git"), Work: filepath.Join(dir, "work")}
	if err := r.git("init", "-q", "--bare", r.Bare); err != nil {
		return nil, err
	}
	if err := r.git("init", "-q", r.Work); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(app)
	if err != nil {
		return nil, fmt.Errorf("app %s: %w", app, err)
	}
	files := map[string]string{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(app, e.Name()))
		if err != nil {
			return nil, err
		}
		files[e.Name()] = string(b)
	}
	if err := r.git("-C", r.Work, "remote", "add", "origin", r.Bare); err != nil {
		return nil, err
	}
	if _, err := r.Commit("deploy "+filepath.Base(app), files); err != nil {
		return nil, err
	}
	return r, r.git("-C", r.Work, "branch", "-q", "--set-upstream-to=origin/main")
}

// URL is the repository's address for a GitSource.
func (r *GitRepo) URL() string { return "file://" + r.Bare }

// Commit writes files (path -> content) into the clone, commits them and pushes; it returns
// the new commit.
func (r *GitRepo) Commit(msg string, files map[string]string) (string, error) {
	for p, content := range files {
		full := filepath.Join(r.Work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	if err := r.git("-C", r.Work, "add", "-A"); err != nil {
		return "", err
	}
	if err := r.git("-C", r.Work, "commit", "-qm", msg); err != nil {
		return "", err
	}
	return r.push()
}

// Revert reverts the last commit and pushes; it returns the new commit.
func (r *GitRepo) Revert() (string, error) {
	if err := r.git("-C", r.Work, "revert", "--no-edit", "HEAD"); err != nil {
		return "", err
	}
	return r.push()
}

// Read returns a file of the clone.
func (r *GitRepo) Read(p string) (string, error) {
	b, err := os.ReadFile(filepath.Join(r.Work, p))
	return string(b), err
}

func (r *GitRepo) push() (string, error) {
	if err := r.git("-C", r.Work, "push", "-q", "origin", "HEAD:main"); err != nil {
		return "", err
	}
	out, err := exec.Command("git", "-C", r.Work, "rev-parse", "HEAD").Output()
	return strings.TrimSpace(string(out)), err
}

func (r *GitRepo) git(args ...string) error {
	cmd := exec.Command("git", append([]string{"-c", "user.name=flotilla", "-c", "user.email=flotilla@flotilla.dev",
		"-c", "init.defaultBranch=main", "-c", "advice.detachedHead=false"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
