package main

import (
	"context"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// extractive is the summary worker's model: a deterministic stand-in for a
// language model. Its summary is the chat's most telling lines, in the
// chat's order: those whose words the chat uses most.
type extractive struct {
	// latency is how long a summary takes: a real model thinks a while, and
	// a worker can freeze meanwhile. The wait does not watch ctx, as a
	// blocking call to a model would not.
	latency time.Duration
	// lines is how many lines a summary keeps; runes bounds its length.
	lines, runes int
}

// words splits text into lower-case words: runs of letters and digits,
// and each letter of scripts written without spaces (Chinese, Japanese, Thai).
func words(text string) []string {
	var out []string
	var word strings.Builder
	flush := func() {
		if word.Len() > 0 {
			out = append(out, word.String())
			word.Reset()
		}
	}
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Thai):
			flush()
			out = append(out, string(r))
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Mc, r):
			word.WriteRune(r)
		default:
			flush()
		}
	}
	flush()
	return out
}

// Summarize gives the chat's lines that score highest (the mean count, over
// the chat, of each line's words), joined in the chat's order.
func (m extractive) Summarize(ctx context.Context, history []string) (string, error) {
	time.Sleep(m.latency)
	count := map[string]int{}
	for _, line := range history {
		for _, w := range words(line) {
			count[w]++
		}
	}
	type scored struct {
		at    int
		score float64
	}
	var best []scored
	seen := map[string]bool{}
	for i, line := range history {
		ws := words(line)
		if len(ws) < 3 || seen[line] {
			continue
		}
		seen[line] = true
		total := 0
		for _, w := range ws {
			total += count[w]
		}
		best = append(best, scored{i, float64(total) / float64(len(ws))})
	}
	sort.SliceStable(best, func(i, j int) bool { return best[i].score > best[j].score })
	if len(best) > m.lines {
		best = best[:m.lines]
	}
	sort.Slice(best, func(i, j int) bool { return best[i].at < best[j].at })
	parts := make([]string, len(best))
	for i, b := range best {
		parts[i] = history[b.at]
	}
	summary := strings.Join(parts, " … ")
	if utf8.RuneCountInString(summary) > m.runes {
		summary = string([]rune(summary)[:m.runes-1]) + "…"
	}
	return summary, nil
}
