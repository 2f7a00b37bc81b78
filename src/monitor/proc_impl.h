/* proc_impl.h - the /proc text parsers of proc.c, exposed for the fuzz targets. */
#ifndef STOKE_PROC_IMPL_H
#define STOKE_PROC_IMPL_H

#include <stdbool.h>
#include <stddef.h>

/* The fields stoke reads from /proc/PID/stat. */
typedef struct stat_fields {
    int ppid;
    unsigned long long ticks, start; /* own + reaped children's CPU; start time (ticks) */
    unsigned long long own_ticks;    /* utime + stime: a thread's own CPU in task/TID/stat */
    long threads, rss_pages;
    bool ended; /* state Z or X: exited, waiting to be reaped (a zombie) or going */
} stat_fields;

/* Parses one /proc/PID/stat text (NUL-terminated). False if it does not have the
 * expected fields; *f is then unspecified. Can't crash on any input. */
bool stoke_proc_parse_stat(const char *text, stat_fields *f);

/* Parses read_bytes and write_bytes from a /proc/PID/io text. False if absent. */
bool stoke_proc_parse_io(const char *text, unsigned long long *rd, unsigned long long *wr);

/* The MPI rank a process's environment (a /proc/PID/environ text: NUL-separated
 * NAME=VALUE entries, len bytes, not necessarily NUL-terminated) names: the first of
 * OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK with a value that is a whole number from 0
 * to 2^30. False if none does. Can't crash on any input. */
bool stoke_proc_parse_environ_rank(const char *buf, size_t len, int *rank);

#endif
