/* libarchive, loaded on first use (sync/archive/larchive.c): sym_archive_*() are
 * libarchive's functions, callable once larchive_load() returned 0. */
#ifndef RDCP_SYNC_LARCHIVE_H
#define RDCP_SYNC_LARCHIVE_H

#include <archive.h>
#include <archive_entry.h>

#define LARCHIVE_SYMS(X) \
	X(archive_entry_clear) X(archive_entry_filetype) X(archive_entry_free) \
	X(archive_entry_new) \
	X(archive_entry_pathname) X(archive_entry_set_filetype) \
	X(archive_entry_set_pathname) X(archive_entry_set_perm) \
	X(archive_entry_set_size) X(archive_entry_size) X(archive_entry_size_is_set) \
	X(archive_error_string) X(archive_read_data_block) X(archive_read_free) \
	X(archive_read_new) X(archive_read_next_header) X(archive_read_open2) \
	X(archive_read_support_format_tar) X(archive_set_error) \
	X(archive_write_close) X(archive_write_data) X(archive_write_fail) \
	X(archive_write_finish_entry) X(archive_write_free) X(archive_write_header) \
	X(archive_write_new) X(archive_write_open2) \
	X(archive_write_set_bytes_per_block) X(archive_write_set_format_ustar)

#define LARCHIVE_DECLARE(f) extern __typeof__(f) *sym_##f;
LARCHIVE_SYMS(LARCHIVE_DECLARE)

/* Load libarchive (once; any thread). 0, or -ENOSYS when it cannot be
 * loaded or lacks a function (said once, with the loader's reason). */
int larchive_load(void);

#endif
