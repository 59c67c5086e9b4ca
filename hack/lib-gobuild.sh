# Shared by hack/build-controlplane.sh and hack/build-operators.sh (sourced).

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# progress LABEL LOG [TOTAL]: consumes `go build -v` / `go install -v` output;
# prints a line every 30 s with the number of packages compiled so far (of
# TOTAL, when known) and modules downloaded, passes anything that is not a
# package name (compiler errors) through, and keeps everything in LOG.
progress() {
  local label="$1" log="$2" total="${3:-}" n=0 dl=0 start=$SECONDS last=$SECONDS line rc
  while :; do
    line=""
    if IFS= read -r -t 5 line; then rc=0; else rc=$?; fi
    if (( rc == 0 )) || { (( rc == 1 )) && [[ -n "$line" ]]; }; then
      printf '%s\n' "$line" >>"$log"
      if [[ "$line" =~ ^[A-Za-z0-9._~/+-]+$ ]]; then n=$((n + 1))
      elif [[ "$line" == "go: downloading "* ]]; then dl=$((dl + 1))
      else printf '    %s\n' "$line"; fi
    fi
    (( rc == 1 )) && break
    if (( SECONDS - last >= 30 )); then
      last=$SECONDS
      printf '  %-23s %s elapsed, %s packages compiled%s\n' "$label" "$(fmt_time $((SECONDS - start)))" \
        "$n${total:+/$total}" "$( ((dl)) && echo ", $dl modules downloaded")"
    fi
  done
  printf '  %-23s %d packages compiled%s\n' "$label" "$n" "$( ((dl)) && echo ", $dl modules downloaded")"
}
