/* dl.h - loading a vendor library at run time into a table of its functions: the one
 * loader of NVIDIA's libraries (hw: NVML and the CUDA runtime; nn: cuBLAS, cuBLASLt,
 * cuDNN), so one binary runs with or without them and each library is found, checked
 * and reported the same way. In core because both hw and nn load through it (dlopen is
 * libc's). Internal.
 *
 * A table is a struct whose first member is the library's dlopen handle (void *),
 * followed by function pointers that the symbol list fills by offset. */
#ifndef STOKE_CORE_DL_H
#define STOKE_CORE_DL_H

#include <stddef.h>

#include "stoke/core.h"

/* One function of the table. `name` may list versions newest first, separated by
 * spaces ("nvmlInit_v2 nvmlInit"): the first the library exports fills the slot, so a
 * newer ABI is used where the driver has it. A required one (optional 0) that the
 * library lacks fails the load, naming the library and the first of its names. */
typedef struct stoke_dl_sym {
    const char *name;
    size_t offset; /* of its slot in the table */
    int optional;  /* a missing one leaves NULL there */
} stoke_dl_sym;

/* One row of a table: the function(s) `names` into field `field` of struct `type`. */
#define STOKE_DL_SYM(type, names, field, optional) \
    {                                              \
        names, offsetof(type, field), optional     \
    }

/* How a library that does not load is reported. The words are the ones users, docs and
 * tests already know for each library, so they are the descriptor's choice. */
typedef enum stoke_dl_words {
    /* "ENV=PATH: <dlerror>"; none of the names: "WHAT not found (tried A, B and C)" */
    STOKE_DL_WORDS_LIST = 0,
    /* "WHAT not found (PATH)", PATH the variable's file or else the first name */
    STOKE_DL_WORDS_FIRST,
    /* "ENV=PATH: <dlerror>"; none of the names: "WHAT not found" (WHAT is the soname) */
    STOKE_DL_WORDS_WHAT,
} stoke_dl_words;

/* A library: `what` names it in messages, `env` is the variable whose value (passed to
 * stoke_dl_open) names a file to load instead of the usual names (the tests' doubles);
 * `names` are tried in order (NULL-terminated), each checked first as a file
 * (stoke_check_library: a FIFO would hang dlopen). */
typedef struct stoke_dl_lib {
    const char *what, *env;
    const char *const *names;
    const stoke_dl_sym *syms;
    size_t nsyms;
    stoke_dl_words words;
} stoke_dl_lib;

/* Loads l into `table` (zeroed by the caller): the file `override` names when it is
 * set and not empty (the value of l->env, which the caller reads by its name), else
 * the first of l->names that loads; then every symbol. *tried: the file loaded or
 * tried (a static name or `override`). STOKE_ERR_UNAVAILABLE when the file is refused
 * (stoke_check_library's message), does not load, or lacks a required function; in the
 * last case the handle is already in the table, the library loaded: the caller decides
 * whether to close it (stoke_dl_close). */
stoke_status stoke_dl_open(const stoke_dl_lib *l, const char *override, void *table,
                           const char **tried);

/* Closes the library of `table` (NULL, or a table never loaded, is fine). */
void stoke_dl_close(void *table);

/* A symbol of the library loaded into `table` that the table does not hold (an export
 * that tells one ABI from another, a test double's marker), or NULL. */
void *stoke_dl_find(const void *table, const char *name);

#endif
