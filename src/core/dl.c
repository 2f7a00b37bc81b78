/* dl.c - the one loader of vendor libraries (dl.h): the file a variable names (the
 * tests' doubles), else the first of the usual names that loads, then every function
 * the table holds, newest version first. */
#include "core/dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "core/regular.h"

/* "a, b and c" from names, for the message when none loads. */
static void list(const char *const *names, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; names[i] && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s",
                              i == 0         ? ""
                              : names[i + 1] ? ", "
                                             : " and ",
                              names[i]);
}

/* The first of the space-separated versions in `names` that lib exports, or NULL. */
static void *find_version(void *lib, const char *names)
{
    while (*names) {
        size_t n = strcspn(names, " ");
        char one[128];
        if (n > 0 && n < sizeof one) {
            memcpy(one, names, n);
            one[n] = '\0';
            void *f = dlsym(lib, one);
            if (f)
                return f;
        }
        names += n;
        names += strspn(names, " ");
    }
    return NULL;
}

/* The dlopen handle of the file `override` names, or NULL with the failure reported. */
static void *open_override(const stoke_dl_lib *l, const char *override)
{
    if (stoke_check_library(l->env, override) != STOKE_OK)
        return NULL; /* a FIFO would hang dlopen; the message is the check's */
    void *lib = dlopen(override, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        if (l->words == STOKE_DL_WORDS_FIRST)
            stoke_fail(STOKE_ERR_UNAVAILABLE, "%s not found (%s)", l->what, override);
        else
            stoke_fail(STOKE_ERR_UNAVAILABLE, "%s=%s: %s", l->env, override,
                       why ? why : "not loaded");
    }
    return lib;
}

/* The first of l->names that loads, *tried naming it, or NULL with the failure reported. */
static void *open_names(const stoke_dl_lib *l, const char **tried)
{
    *tried = l->names[0];
    for (int i = 0; l->names[i]; i++) {
        if (stoke_check_library(NULL, l->names[i]) != STOKE_OK)
            continue; /* a path that is not a file: the next */
        void *lib = dlopen(l->names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            *tried = l->names[i];
            return lib;
        }
    }
    char names[512];
    switch (l->words) {
    case STOKE_DL_WORDS_FIRST:
        stoke_fail(STOKE_ERR_UNAVAILABLE, "%s not found (%s)", l->what, l->names[0]);
        break;
    case STOKE_DL_WORDS_WHAT: stoke_fail(STOKE_ERR_UNAVAILABLE, "%s not found", l->what); break;
    default:
        list(l->names, names, sizeof names);
        stoke_fail(STOKE_ERR_UNAVAILABLE, "%s not found (tried %s)", l->what, names);
    }
    return NULL;
}

stoke_status stoke_dl_open(const stoke_dl_lib *l, const char *override, void *table,
                           const char **tried)
{
    void *lib;
    if (override && *override) {
        *tried = override;
        lib = open_override(l, override);
    } else {
        lib = open_names(l, tried);
    }
    if (!lib)
        return STOKE_ERR_UNAVAILABLE;
    memcpy(table, &lib, sizeof lib);
    for (size_t i = 0; i < l->nsyms; i++) {
        void *f = find_version(lib, l->syms[i].name);
        memcpy((char *)table + l->syms[i].offset, &f, sizeof f);
        if (!f && !l->syms[i].optional)
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s lacks %.*s", *tried,
                              (int)strcspn(l->syms[i].name, " "), l->syms[i].name);
    }
    return STOKE_OK;
}

void stoke_dl_close(void *table)
{
    void *lib = NULL;
    if (table)
        memcpy(&lib, table, sizeof lib);
    if (lib)
        dlclose(lib);
}

void *stoke_dl_find(const void *table, const char *name)
{
    void *lib = NULL;
    if (table)
        memcpy(&lib, table, sizeof lib);
    return lib ? dlsym(lib, name) : NULL;
}
