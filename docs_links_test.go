package nodeguard_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines keeps README.md an entrance, not a manual: what does not
// fit belongs in docs/.
const readmeMaxLines = 300

// TestREADMEStaysShort fails when README.md grows past readmeMaxLines.
func TestREADMEStaysShort(t *testing.T) {
	lines, err := readLines("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move reference prose into docs/", len(lines), readmeMaxLines)
	}
}

// TestMarkdownLinksResolve checks every relative link and image in
// README.md and docs/**/*.md: the file it names must exist inside the
// repository, and a #fragment on a Markdown file must name one of its
// headings (GitHub's anchors). Links to other sites are not fetched.
func TestMarkdownLinksResolve(t *testing.T) {
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk docs: %v", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, file := range files {
		links, err := markdownLinks(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			target, fragment, _ := strings.Cut(l.target, "#")
			var path string
			if target == "" {
				path = file
			} else {
				path = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
			}
			abs, err := filepath.Abs(path)
			if err != nil {
				t.Fatal(err)
			}
			if abs != root && !strings.HasPrefix(abs, root+string(filepath.Separator)) {
				t.Errorf("%s:%d: link %q leaves the repository", file, l.line, l.target)
				continue
			}
			checked++
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s:%d: link %q: %v", file, l.line, l.target, err)
				continue
			}
			if fragment == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if anchors[path] == nil {
				if anchors[path], err = headingAnchors(path); err != nil {
					t.Fatal(err)
				}
			}
			if !anchors[path][fragment] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", file, l.line, l.target, path, fragment)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the link extraction is broken")
	}
}

func TestMarkdownLinkExtraction(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.md")
	text := "# A title: with `code` (and more)\n" +
		"See [the docs](docs/a.md#a-title-with-code-and-more) and ![plot](p.png \"title\").\n" +
		"Not `[code](nolink.md)`, not [site](https://example.com), [anchor](#here).\n" +
		"```\n[in a block](block.md)\n## not a heading\n```\n" +
		"## A title: with `code` (and more)\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	links, err := markdownLinks(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range links {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	want := []string{"2:docs/a.md#a-title-with-code-and-more", "2:p.png", "3:#here"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("links = %q, want %q", got, want)
	}
	anchors, err := headingAnchors(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"a-title-with-code-and-more", "a-title-with-code-and-more-1"} {
		if !anchors[a] {
			t.Errorf("anchor %q missing from %v", a, anchors)
		}
	}
	if anchors["not-a-heading"] {
		t.Error("a heading inside a fenced block made an anchor")
	}
}

type link struct {
	line   int
	target string
}

var (
	// linkRE matches an inline link or image: [text](target "title").
	linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// codeSpanRE matches an inline code span, whose brackets are not links.
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	schemeRE   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownLinks returns the relative link targets of a Markdown file,
// outside fenced code blocks and code spans.
func markdownLinks(path string) ([]link, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	var out []link
	fenced := false
	for i, l := range lines {
		if isFence(l) {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(l, ""), -1) {
			if schemeRE.MatchString(m[1]) {
				continue
			}
			out = append(out, link{line: i + 1, target: m[1]})
		}
	}
	return out, nil
}

// headingAnchors returns the anchors GitHub makes for a Markdown file's
// headings: lower case, punctuation dropped, spaces made hyphens, and -1,
// -2, ... added to repeats.
func headingAnchors(path string) (map[string]bool, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range lines {
		if isFence(l) {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimLeft(l, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out, nil
}

func isFence(line string) bool {
	t := strings.TrimSpace(line)
	return strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return lines, nil
}
