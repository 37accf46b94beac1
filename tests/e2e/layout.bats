#!/usr/bin/env bats
# The source tree's rules (docs/architecture.md, "Rooms and what each may
# include"): checked on the includes (grep) and on the built objects'
# symbols (nm), so a call across a wall fails here, not in review.
load helpers

TOP=$BATS_TEST_DIRNAME/../..

# includes FILES...: the quoted includes of the files, one "file: header" a line
includes() {
	grep -H -o '^#include "[^"]*"' "$@" | sed 's/#include "\(.*\)"/\1/'
}
# broken PATTERN FILES...: the includes of FILES that match PATTERN
broken() {
	local pat=$1; shift
	includes "$@" | grep -E ":($pat)\$" || true
}

@test "layout: modules include only what is below them (common <- index, transport <- sync, pipe <- programs)" {
	cd "$TOP"
	local b
	b=$(broken 'index/.*|transport/.*|sync/.*|pipe/.*' common/*.[ch])
	b+=$(broken 'transport/.*|sync/.*|pipe/.*' index/*.[ch])
	b+=$(broken 'index/.*|sync/.*|pipe/.*' transport/*.[ch])
	b+=$(broken 'sync/.*|index/.*' pipe/*.[ch])
	b+=$(broken 'pipe/.*' sync/*.[ch] sync/*/*.[ch])
	echo "$b"
	[ -z "$b" ]
}

@test "layout: programs include only public headers; a private header (*_int.h) stays in its folder" {
	cd "$TOP"
	local b h dir
	b=$(includes programs/*.c | grep -Ev ':(common/[a-z]+|index/index|transport/transport|sync/sync|pipe/pipe)\.h$' || true)
	for h in $(ls index/*_int.h transport/*_int.h pipe/*_int.h); do
		dir=${h%/*}
		b+=$(includes $(ls ./*/*.[ch] ./*/*/*.[ch] 2>/dev/null | grep -v "^./$dir/" |
			grep -v '^./tests/') | grep ":$h\$" || true)
	done
	# sync/'s: its top files' private headers stay in sync/ (the rooms'
	# own are the other tests')
	for h in sync/sync_int.h sync/client_int.h sync/watch_int.h; do
		b+=$(includes programs/*.c index/*.[ch] transport/*.[ch] pipe/*.[ch] common/*.[ch] |
			grep ":$h\$" || true)
	done
	echo "$b"
	[ -z "$b" ]
}

@test "layout: sync/'s sending and receiving rooms never include each other; fan-out and the shared rooms include neither" {
	cd "$TOP"
	local b
	b=$(broken 'sync/recv/.*' sync/send/*.[ch])
	b+=$(broken 'sync/send/.*' sync/recv/*.[ch])
	b+=$(broken 'sync/(send|recv)/.*' sync/fanout/*.[ch] sync/delta/*.[ch] \
		sync/archive/*.[ch] sync/select/*.[ch] sync/wire/*.[ch])
	# the shared rooms stand on sync_int.h alone, not on one another's
	# users: delta, archive, select and wire include no fan-out either
	b+=$(broken 'sync/fanout/.*' sync/delta/*.[ch] sync/archive/*.[ch] sync/select/*.[ch] \
		sync/wire/*.[ch])
	# the run (sync/*.c) reaches a room through its public header only
	b+=$(broken 'sync/(send/send_int|recv/recv_int|fanout/fanout_int)\.h' sync/*.[ch])
	echo "$b"
	[ -z "$b" ]
}

@test "layout: no call between the sending and receiving rooms, or from fan-out into either (nm of the objects)" {
	local o=${RDCP_BUILD:-$TOP/build}/sync
	[ -d "$o/send" ] && [ -d "$o/recv" ] || skip "SKIPPED: no objects in $o (build first)"
	defs() { nm -g --defined-only "$@" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u; }
	undefs() { nm -u "$@" 2>/dev/null | awk '{ print $NF }' | sort -u; }
	# entry points every room may call: the run's, declared in sync_int.h
	local allowed='^(sync_sender|sync_receiver|sync_serve)$'
	local b
	b=$(comm -12 <(undefs "$o"/send/*.o) <(defs "$o"/recv/*.o) | grep -Ev "$allowed" |
		sed 's/^/send calls recv: /')
	b+=$(comm -12 <(undefs "$o"/recv/*.o) <(defs "$o"/send/*.o) | grep -Ev "$allowed" |
		sed 's/^/recv calls send: /')
	b+=$(comm -12 <(undefs "$o"/fanout/*.o) <(defs "$o"/recv/*.o "$o"/send/*.o) |
		grep -Ev "$allowed" | sed 's/^/fanout calls a side: /')
	for r in delta archive select wire; do
		b+=$(comm -12 <(undefs "$o/$r"/*.o) <(defs "$o"/recv/*.o "$o"/send/*.o "$o"/fanout/*.o) |
			sed "s/^/$r calls a side: /")
	done
	echo "$b"
	[ -z "$b" ]
}

@test "layout: sync/'s shared header stays small, and each room has its own" {
	cd "$TOP"
	local n; n=$(wc -l <sync/sync_int.h)
	echo "sync_int.h: $n lines"
	[ "$n" -le 300 ]
	for h in sync/send/send_int.h sync/recv/recv_int.h sync/fanout/fanout.h \
		sync/delta/delta.h sync/archive/archive.h sync/select/select.h sync/wire/proto.h; do
		[ -f "$h" ]
	done
}
