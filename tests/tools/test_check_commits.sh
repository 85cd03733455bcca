#!/usr/bin/env bash
# scripts/check-commits on throwaway repositories: history before
# CONTRIBUTING.md is exempt, a good message passes, each kind of bad one fails.
set -euo pipefail
CHECK=$(cd "$(dirname "$0")/../.." && pwd)/scripts/check-commits
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t

repo() {  # a repo whose old history breaks the rule, then CONTRIBUTING.md
  rm -rf "$tmp/r"; git init -q "$tmp/r"
  git -C "$tmp/r" commit -q --allow-empty -m "old style: a lowercase subject that runs on far past seventy-two characters, as before"
  echo rules >"$tmp/r/CONTRIBUTING.md"; git -C "$tmp/r" add CONTRIBUTING.md
  git -C "$tmp/r" commit -q -m "Write the commit convention down" -m "So that the history explains itself."
}
expect() {  # expect RC MESSAGE...: commit MESSAGE (git -m paragraphs), check
  local rc=$1; shift
  repo
  local args=(); for m in "$@"; do args+=(-m "$m"); done
  git -C "$tmp/r" commit -q --allow-empty "${args[@]}"
  set +e; out=$("$CHECK" "$tmp/r" 2>&1); got=$?; set -e
  if [ "$got" != "$rc" ]; then
    echo "FAIL: expected exit $rc, got $got for: $*"; echo "$out"; exit 1
  fi
}
expect 0 "Compile grammars once" "The second compile cost the first token 60 ms."
expect 1 "Compile grammars once, off the first token's path, in one place, and no more threads"  "Why."
expect 1 "compile grammars once" "Why."
expect 1 "Compile grammars once." "Why."
expect 1 "Added a cache" "Why."
expect 0 "forward.cpp: point the head comment at its section" "Why."
expect 1 "forward.cpp: pointed the head comment at its section" "Why."
expect 1 "Compile grammars once"
expect 1 "Compile grammars once" "$(printf 'x %.0s' {1..40})"
expect 0 "Compile grammars once" "Why, and a table:" "    $(printf 'x %.0s' {1..40})"
echo "test_check_commits: all cases as expected"
