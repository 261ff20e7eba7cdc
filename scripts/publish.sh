#!/usr/bin/env bash
# Publish the patched transformers fork: push the build tree's HEAD (v4.31.0 + the series) to a git remote.
#
# Usage: scripts/publish.sh REMOTE BRANCH
#   REMOTE  a git URL or path (https://..., ssh://..., git@host:org/repo.git, file:///..., /path/to/repo.git)
#   BRANCH  the branch to create or replace there
# Environment: TREE (default build/transformers) is the tree whose HEAD is published.
#
# The branch is rebuilt from the series on every `make apply`, so publishing replaces it: the push is forced,
# with a lease on the value the remote had when this script looked (a concurrent push in between is not lost).
# The tree must be clean and its HEAD must descend from the pristine tag upstream-v4.31.0.
# On success, prints the line that installs the fork with pip.
set -euo pipefail

usage() {
    echo "usage: $0 REMOTE BRANCH   (e.g. make publish REMOTE=git@github.com:me/transformers.git BRANCH=assisted-fix)" >&2
    exit 2
}

[ $# -eq 2 ] || usage
remote=$1
branch=$2
[ -n "$remote" ] && [ -n "$branch" ] || usage
tree=${TREE:-build/transformers}
pristine=upstream-v4.31.0

git check-ref-format "refs/heads/$branch" || { echo "publish: '$branch' is not a valid branch name" >&2; exit 2; }
git -C "$tree" rev-parse -q --verify HEAD >/dev/null || { echo "publish: $tree is not a git tree with commits (run make apply)" >&2; exit 1; }
git -C "$tree" rev-parse -q --verify "refs/tags/$pristine" >/dev/null || { echo "publish: $tree has no tag $pristine" >&2; exit 1; }
git -C "$tree" merge-base --is-ancestor "$pristine" HEAD || { echo "publish: HEAD of $tree does not descend from $pristine" >&2; exit 1; }
if [ -n "$(git -C "$tree" status --porcelain --untracked-files=no)" ]; then
    echo "publish: $tree has uncommitted changes; commit them (and make export) or run make apply first" >&2
    exit 1
fi

# A local path becomes absolute (git runs in $tree) and a file:// URL for pip; other URLs are used as they are
# (scp-like ones become ssh:// for pip).
case "$remote" in
    *://*) url=$remote ;;
    *@*:*) url="ssh://${remote%%:*}/${remote#*:}" ;;
    *)
        [ -d "$remote" ] || { echo "publish: $remote is neither a URL nor an existing repository" >&2; exit 1; }
        remote=$(cd "$remote" && pwd)
        # file://localhost/...: older pips (23.2, the one Python 3.11 ships) reject "name @ git+file:///..." (a
        # URL without a host); newer ones accept both forms.
        url="file://localhost$remote"
        ;;
esac

head=$(git -C "$tree" rev-parse HEAD)
old=$(git -C "$tree" ls-remote "$remote" "refs/heads/$branch" | cut -f1)
commits=$(git -C "$tree" rev-list --count "$pristine..HEAD")
git -C "$tree" push --quiet --force-with-lease="refs/heads/$branch:$old" "$remote" "HEAD:refs/heads/$branch"

if [ -z "$old" ]; then
    echo "publish: created $branch at ${head:0:12} ($commits patches on $pristine) in $remote"
elif [ "$old" = "$head" ]; then
    echo "publish: $branch is already at ${head:0:12} in $remote"
else
    echo "publish: moved $branch from ${old:0:12} to ${head:0:12} ($commits patches on $pristine) in $remote"
fi
echo "install with:"
echo "  pip install \"transformers @ git+$url@$branch\""
