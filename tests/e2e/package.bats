#!/usr/bin/env bats
# What a deployment uses: the Debian package (make deb), the systemd units,
# bash completion. make deb-check (not here: ~1 minute, ~6 the first time,
# network) installs the package in a minimal Debian 12 chroot.
load helpers

ROOT=$BATS_TEST_DIRNAME/../..
BUILD_DIR=$(dirname "$RDCP")

@test "make deb: programs, man pages, docs, units, completion; Depends from the libraries, libarchive (dlopen) too" {
	command -v dpkg-shlibdeps >/dev/null || { echo "dpkg-shlibdeps missing (dpkg-dev)"; false; }
	DEB_OUT=$T BUILD=$BUILD_DIR VERSION=$("$RDCP" --version | cut -d' ' -f2) \
		"$ROOT/scripts/deb.sh" >"$T/out" 2>&1 || { cat "$T/out"; false; }
	local deb; deb=$(ls "$T"/rdcp_*.deb)
	dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|' >"$T/files"
	local f
	for f in /usr/bin/rdcp /usr/bin/rdsend /usr/bin/rdrecv /usr/bin/rdpipe \
	         /usr/share/man/man1/rdcp.1.gz /usr/share/man/man1/rdsend.1.gz \
	         /usr/share/man/man1/rdrecv.1.gz /usr/share/man/man1/rdpipe.1.gz \
	         /usr/share/doc/rdcp/copyright /usr/share/doc/rdcp/README.md \
	         /usr/share/doc/rdcp/examples/example.conf \
	         /usr/lib/systemd/system/rdcp-sync@.service /usr/lib/systemd/system/rdcp-sync@.timer \
	         /usr/lib/systemd/system/rdcp-watch@.service /usr/lib/tmpfiles.d/rdcp.conf \
	         /usr/share/bash-completion/completions/rdcp /usr/lib/rdcp/rdcp-mpi.so; do
		grep -qx "$f" "$T/files" || { echo "not in the package: $f"; false; }
	done
	# the units name the installed programs
	dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/systemd/system/rdcp-sync@.service |
		grep -q '^ExecStart=/usr/bin/rdcp --sync '
	# Depends: every library the programs link (NEEDED), by its package,
	# and libarchive's, which rdcp loads with dlopen
	local dep lib pkg so; dep=$(dpkg-deb -f "$deb" Depends)
	echo "Depends: $dep"
	for so in $(objdump -p "$RDCP" | awk '$1 == "NEEDED" { print $2 }'); do
		lib=$(ldd "$RDCP" | awk -v s="$so" '$1 == s { print $3 }')
		pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -1 | cut -d: -f1) || true
		[ -n "$pkg" ] || continue   # not from a package (a sanitizer build's)
		[[ "$pkg" == libc6 || ", $dep" == *", $pkg"* ]] || { echo "Depends lacks $pkg ($lib)"; false; }
	done
	[[ "$dep" == *libarchive13* ]]
	[[ "$dep" != *-dev* ]]
	# Open MPI: for ranked runs only (rdcp-mpi.so, loaded under mpirun)
	[[ "$dep" != *openmpi* ]]
	[[ "$(dpkg-deb -f "$deb" Suggests)" == *openmpi-bin* ]]
}

# units FILE...: the units as installed, naming the programs in the build
units() {
	mkdir -p "$T/units"
	local u
	for u in "$ROOT"/packaging/systemd/*.in; do
		sed "s|@BINDIR@|$BUILD_DIR|g" "$u" >"$T/units/$(basename "$u" .in)"
	done
	cp "$ROOT"/packaging/systemd/*.timer "$T/units/"
}

@test "systemd: rdcp-sync@.service, rdcp-sync@.timer and rdcp-watch@.service pass systemd-analyze verify, clean" {
	command -v systemd-analyze >/dev/null || { echo "systemd-analyze missing (systemd)"; false; }
	units
	# an instance of each; verify prints nothing for a clean unit (a
	# setting it cannot parse is only a warning, so the output must be empty)
	run systemd-analyze verify --man=no "$T/units/rdcp-sync@models.service" \
		"$T/units/rdcp-sync@models.timer" "$T/units/rdcp-watch@models.service"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	# what the issue asks of them
	grep -qx 'Restart=on-failure' "$T/units/rdcp-watch@.service"
	grep -qx 'EnvironmentFile=/etc/rdcp/%i.conf' "$T/units/rdcp-watch@.service"
	grep -qx 'StandardError=journal' "$T/units/rdcp-watch@.service"
	grep -q '^ExecStart=.*/rdcp --sync --watch ' "$T/units/rdcp-watch@.service"
	grep -q 'rdcp(1), WATCH' "$T/units/rdcp-watch@.service"
	grep -q '^OnCalendar=' "$T/units/rdcp-sync@.timer"
	# a unit with a broken setting fails this check (it can fail)
	sed 's/^Restart=on-failure/Restart=sometimes/' "$T/units/rdcp-watch@.service" >"$T/units/bad@.service"
	run systemd-analyze verify --man=no "$T/units/bad@x.service"
	[ -n "$output" ]
}

# The watch unit's command, as systemd would run it: its ExecStart with
# the variables of an /etc/rdcp/NAME.conf (a local SRC and DST here), its
# stop signal (SIGTERM) ending it with exit 0, so that systemctl stop is
# no failure and Restart=on-failure does not fire.
@test "systemd: rdcp-watch@.service's command mirrors live and stops cleanly on its KillSignal" {
	units
	mkdir -p "$T/src" "$T/dst"
	echo one >"$T/src/one"
	local cmd
	cmd=$(sed -n 's/^ExecStart=//p' "$T/units/rdcp-watch@.service")
	[ "$(sed -n 's/^KillSignal=//p' "$T/units/rdcp-watch@.service")" = SIGTERM ]
	# systemd's expansion: $RDCP_OPTS split at spaces, ${SRC} and ${DST} whole
	local RDCP_OPTS="--delete --timeout 600" SRC=$T/src DST=$T/dst
	cmd=${cmd//'${SRC}'/$SRC}
	cmd=${cmd//'${DST}'/$DST}
	cmd=${cmd//'$RDCP_OPTS'/$RDCP_OPTS}
	echo "$cmd"
	XDG_CACHE_HOME=$T/cache $cmd >"$T/out" 2>"$T/err" &
	local pid=$! i
	for ((i = 0; i < 200; i++)); do [ -e "$T/dst/one" ] && break; sleep 0.05; done
	echo two >"$T/src/two"
	rm "$T/src/one"
	for ((i = 0; i < 200; i++)); do [ -e "$T/dst/two" ] && [ ! -e "$T/dst/one" ] && break; sleep 0.05; done
	kill -TERM "$pid"
	local rc=0
	wait "$pid" || rc=$?
	cat "$T/out" "$T/err"
	echo "exit $rc"
	# between rounds exit 0; amid one (its last steps can still run when
	# DST already looks right) exit 20, which the unit counts a clean stop
	[ "$rc" -eq 0 ] || { [ "$rc" -eq 20 ] && grep -qx 'SuccessExitStatus=20' "$T/units/rdcp-watch@.service"; }
	[ "$(cat "$T/dst/two")" = two ] && [ ! -e "$T/dst/one" ]
	# nothing half-written left either way
	[ -z "$(find "$T/dst" -name '.rdcp-tmp-*')" ]
}

# comp LINE: what bash completion offers at the end of LINE, one a line
comp() {
	HOME=$T/home PATH=$BUILD_DIR:$PATH bash -c '
		source "$1"
		COMP_LINE=$2; COMP_POINT=${#2}
		read -ra COMP_WORDS <<<"$2"
		[[ $2 == *" " ]] && COMP_WORDS+=("")
		COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
		last=${COMP_WORDS[COMP_CWORD]}
		[[ $last == *:* ]] && COMP_WORDS[COMP_CWORD]=${last##*:}   # bash splits at :
		_rdcp 2>/dev/null
		printf "%s\n" "${COMPREPLY[@]}"' _ "$ROOT/packaging/bash-completion/rdcp" "$1"
}

@test "bash completion: rdcp's options are exactly those it takes (read from --help, which must name them all)" {
	# every long option of the table in sync/opts.c, but --relay, --rounds,
	# --windows, --ranked and --ranked-witness (the client's own, for its far side) and
	# -z/--compress(-level) (refused: the help says why)
	grep -o '{ { "[a-z-]*"' "$ROOT/sync/opts.c" | cut -d'"' -f2 |
		grep -vxE 'relay|rounds|windows|ranked|ranked-witness|compress|compress-level' | sed 's/^/--/' |
		sort >"$T/want"
	comp "rdcp --" | sort >"$T/got"
	diff "$T/want" "$T/got"
	# the short ones: shortopts, but z
	local s
	s=$(grep -o 'shortopts\[\] = "[^"]*"' "$ROOT/sync/opts.c" | cut -d'"' -f2 | tr -d ':z' | fold -w1 | sed 's/^/-/' | sort)
	diff <(echo "$s") <(comp "rdcp -" | grep -xE -- '-[a-zA-Z]' | sort)
	# a prefix narrows them; rdsend's come from rdsend --help
	[ "$(comp "rdcp --delete-b")" = "--delete-before" ]
	[ "$(comp "rdsend --key")" = "--key-file" ]
}

@test "bash completion: host: names from ~/.ssh/config and known_hosts, user@ kept; wildcards and hashed names left out; local paths too" {
	mkdir -p "$T/home/.ssh" "$T/w/gpu-local-dir"
	printf 'Host gpu7 gpu8\n  HostName 10.0.0.7\nHost *\n  User x\nhost gpx?\nHost lh2\n' >"$T/home/.ssh/config"
	printf 'node1,10.0.0.1 ssh-ed25519 AAAA\n[node2]:2222 ssh-ed25519 AAAA\n|1|abc=|def= ssh-ed25519 AAAA\n' \
		>"$T/home/.ssh/known_hosts"
	cd "$T/w"
	diff <(printf 'gpu-local-dir/\ngpu7:\ngpu8:\n') <(comp "rdcp -a gp" | sort)
	diff <(printf 'root@node1:\nroot@node2:\n') <(comp "rdcp --sync root@no" | sort)
	[ "$(comp "rdcp --sync src lh")" = "lh2:" ]
	# after host: the far side's paths are for ssh to list; nothing local
	# is offered (this bash has no bash-completion ssh helpers loaded)
	[ -z "$(comp "rdcp --sync src gpu7:/ca")" ]
}
