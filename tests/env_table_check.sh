#!/usr/bin/env bash
# env_table_check.sh ENV_TABLE_BINARY README: every row the library's table prints is in README.
set -u
table=$("$1") || { echo "FAIL: $1 did not run"; exit 1; }
missing=0
while IFS= read -r row; do
    if ! grep -qxF -- "$row" "$2"; then
        echo "FAIL: README.md lacks the row: $row"
        missing=$((missing + 1))
    fi
done <<<"$table"
rows=$(wc -l <<<"$table")
[ "$missing" -eq 0 ] && echo "PASS: all $rows rows of the env table are in README.md"
exit $((missing > 0))
