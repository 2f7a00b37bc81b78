/* yaml_util.c - the checks every stoke YAML reader shares, made on libyaml's events
 * before the document is loaded: depth, aliases, tags, one document, unique keys. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/yaml_util.h"

#include "core/regular.h"

/* Why the checks run on events, before yaml_parser_load, rather than on the loaded
 * tree (measured with libyaml 0.2.5, Debian 12):
 * - Depth. The loader itself does not recurse (1,000,000 nested "- " load), but it
 *   costs about 300 bytes a level (2 MB of "- - - ..." take 300 MB), and the scanner
 *   rescans every open flow level for each token, so flow nesting is quadratic:
 *   10,000 nested "[{type: residual, layers: " take 5 s, 1,000,000 "[" had not
 *   finished after 13 minutes (block nesting is cheap: 5,000 levels, 12 MB, 0.1 s).
 *   The events stop at the first level past the limit, a few kilobytes in at most.
 * - Aliases. The loader makes an alias share the node it names, so a walk over the
 *   tree follows it: "&a [*a]" is a cycle (a walk never ends: a stack overflow), and
 *   eight anchors each repeating the last ten times are 10^8 layers in 3 KB.
 *   Only the events still say where an alias is. */

typedef struct seen_key {
    char *text; /* as written, for messages */
    char *same; /* as compared: '-' taken as '_' where the reader says so */
    size_t len;
    size_t line, col; /* 0-based, as libyaml's marks */
    size_t order;     /* position in the mapping */
} seen_key;

typedef struct level {
    bool mapping;
    bool want_key; /* mapping: the next node is a key */
    bool has_key;
    char key[64];   /* mapping: the current key, cut to fit, for paths */
    long items;     /* sequence: items so far */
    seen_key *keys; /* mapping: every key, for the duplicate check */
    size_t nkeys, cap;
} level;

typedef struct scan {
    const char *name;
    bool dash_is_underscore;
    level lv[TRAIN_YAML_MAX_DEPTH + 1];
    int depth;
} scan;

static void level_clear(level *l)
{
    for (size_t i = 0; i < l->nkeys; i++) {
        if (l->keys[i].same != l->keys[i].text)
            free(l->keys[i].same);
        free(l->keys[i].text);
    }
    free(l->keys);
    memset(l, 0, sizeof *l);
}

/* Level i's part of the path of the node being read: ".key" ("key" first), "[n]" or
 * nothing. `at_key`: the node is a key of the innermost mapping, which then names no
 * key of its own. */
static int path_part(const scan *s, int i, bool at_key, bool first, char *buf, size_t size)
{
    const level *l = &s->lv[i];
    int n = 0;
    if (l->mapping && l->has_key && !(i == s->depth - 1 && at_key))
        n = snprintf(buf, size, "%s%s", first ? "" : ".", l->key);
    else if (!l->mapping && l->items > 0)
        n = snprintf(buf, size, "[%ld]", l->items - 1);
    else if (size)
        buf[0] = '\0';
    return n < 0 ? 0 : (int)((size_t)n < size ? (size_t)n : size - 1);
}

/* The path of the node being read ("layers[2].out"). A path too long for buf keeps its
 * start (the key a user looks for) and its end, with " ... " between. */
static void path_of(const scan *s, bool at_key, char *buf, size_t size)
{
    int len[TRAIN_YAML_MAX_DEPTH];
    char part[80];
    size_t total = 0;
    bool first = true;
    for (int i = 0; i < s->depth; i++) {
        len[i] = path_part(s, i, at_key, first, part, sizeof part);
        first &= len[i] == 0;
        total += (size_t)len[i];
    }
    size_t n = 0, head = total < size ? size : size / 2 - 3;
    int i = 0;
    for (first = true; i < s->depth && n + (size_t)len[i] < head; i++) {
        path_part(s, i, at_key, first, buf + n, size - n);
        n += (size_t)len[i];
        first &= len[i] == 0;
    }
    if (i < s->depth) {
        int j = s->depth;
        for (size_t tail = 0; j > i && n + 5 + tail + (size_t)len[j - 1] < size; j--)
            tail += (size_t)len[j - 1];
        n += (size_t)snprintf(buf + n, size - n, " ... ");
        for (; j < s->depth; j++) {
            path_part(s, j, at_key, false, part, sizeof part);
            bool after_cut = buf[n - 1] == ' ' && part[0] == '.';
            n += (size_t)snprintf(buf + n, size - n, "%s", part + after_cut);
        }
    }
    buf[n < size ? n : size - 1] = '\0';
}

static stoke_status scan_fail(const scan *s, const yaml_mark_t *m, bool at_key, const char *what)
{
    char path[112];
    path_of(s, at_key, path, sizeof path);
    return stoke_fail(STOKE_ERR_FORMAT, "%s:%zu:%zu: %s%s%s", s->name, m->line + 1, m->column + 1,
                      path, path[0] ? ": " : "", what);
}

static int same_key(const seen_key *a, const seen_key *b)
{
    size_t n = a->len < b->len ? a->len : b->len;
    int d = memcmp(a->same, b->same, n);
    return d ? d : a->len < b->len ? -1 : a->len > b->len;
}

static int key_order(const void *pa, const void *pb)
{
    const seen_key *a = pa, *b = pb;
    int d = same_key(a, b);
    return d ? d : a->order < b->order ? -1 : a->order > b->order;
}

/* At the end of a mapping: its first key given twice, named with both lines. Sorting
 * keeps a mapping of n keys at n log n (a pairwise check is quadratic, and a 16 MB file
 * holds a million keys). */
static stoke_status check_keys(scan *s, level *l)
{
    if (l->nkeys < 2)
        return STOKE_OK;
    qsort(l->keys, l->nkeys, sizeof *l->keys, key_order);
    const seen_key *dup = NULL, *first = NULL;
    for (size_t i = 1, run = 0; i < l->nkeys; i++) {
        if (same_key(&l->keys[run], &l->keys[i]) != 0) {
            run = i;
            continue;
        }
        if (!dup || l->keys[i].order < dup->order) {
            dup = &l->keys[i];
            first = &l->keys[run];
        }
    }
    if (!dup)
        return STOKE_OK;
    char path[112], as[96] = "";
    path_of(s, true, path, sizeof path);
    if (first->len != dup->len || memcmp(first->text, dup->text, dup->len) != 0)
        snprintf(as, sizeof as, " as '%.64s'", first->text);
    return stoke_fail(STOKE_ERR_FORMAT,
                      "%s:%zu:%zu: %s%s%.64s: key given twice (first at "
                      "line %zu%s)",
                      s->name, dup->line + 1, dup->col + 1, path, path[0] ? "." : "", dup->text,
                      first->line + 1, as);
}

static stoke_status add_key(scan *s, level *l, const yaml_event_t *e)
{
    if (l->nkeys == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        seen_key *k = realloc(l->keys, cap * sizeof *k);
        if (!k)
            return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", s->name);
        l->keys = k;
        l->cap = cap;
    }
    size_t len = e->data.scalar.length;
    char *text = malloc(len + 1);
    char *same = text && s->dash_is_underscore ? malloc(len + 1) : text;
    if (!same) {
        free(text);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", s->name);
    }
    memcpy(text, e->data.scalar.value, len);
    text[len] = '\0';
    if (same != text)
        for (size_t i = 0; i <= len; i++)
            same[i] = text[i] == '-' ? '_' : text[i];
    l->keys[l->nkeys] =
        (seen_key){text, same, len, e->start_mark.line, e->start_mark.column, l->nkeys};
    l->nkeys++;
    return STOKE_OK;
}

/* One node event: where it sits (key or value, item number), then what is refused. */
static stoke_status on_node(scan *s, const yaml_event_t *e)
{
    level *top = s->depth ? &s->lv[s->depth - 1] : NULL;
    bool at_key = top && top->mapping && top->want_key;
    if (top && top->mapping) {
        top->want_key = !top->want_key;
        if (at_key) {
            top->has_key = e->type == YAML_SCALAR_EVENT;
            if (top->has_key) {
                snprintf(top->key, sizeof top->key, "%.*s",
                         (int)(e->data.scalar.length < 63 ? e->data.scalar.length : 63),
                         (const char *)e->data.scalar.value);
                stoke_status st = add_key(s, top, e);
                if (st != STOKE_OK)
                    return st;
            }
        }
    } else if (top) {
        top->items++;
    }
    const yaml_char_t *tag = e->type == YAML_SCALAR_EVENT           ? e->data.scalar.tag
                             : e->type == YAML_SEQUENCE_START_EVENT ? e->data.sequence_start.tag
                             : e->type == YAML_MAPPING_START_EVENT  ? e->data.mapping_start.tag
                                                                    : NULL;
    if (e->type == YAML_ALIAS_EVENT) {
        char what[160];
        snprintf(what, sizeof what, "aliases (*%.64s) are not supported: write the value out",
                 (const char *)e->data.alias.anchor);
        return scan_fail(s, &e->start_mark, at_key, what);
    }
    if (tag) {
        /* libyaml expands !!int to its full name; say it as it was written */
        static const char core[] = "tag:yaml.org,2002:";
        bool short_form = !strncmp((const char *)tag, core, sizeof core - 1);
        char what[160];
        snprintf(what, sizeof what, "tags (%s%.64s) are not supported: write the plain value",
                 short_form ? "!!" : "", (const char *)tag + (short_form ? sizeof core - 1 : 0));
        return scan_fail(s, &e->start_mark, at_key, what);
    }
    if (e->type == YAML_SEQUENCE_START_EVENT || e->type == YAML_MAPPING_START_EVENT) {
        if (s->depth == TRAIN_YAML_MAX_DEPTH) {
            char what[160];
            snprintf(what, sizeof what,
                     "lists and mappings nested deeper than %d levels "
                     "(stoke's limit)",
                     TRAIN_YAML_MAX_DEPTH);
            return scan_fail(s, &e->start_mark, at_key, what);
        }
        level *l = &s->lv[s->depth++];
        memset(l, 0, sizeof *l);
        l->mapping = e->type == YAML_MAPPING_START_EVENT;
        l->want_key = true;
    }
    return STOKE_OK;
}

static stoke_status parse_error(const char *name, const yaml_parser_t *p)
{
    if (p->error == YAML_MEMORY_ERROR)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", name);
    return stoke_fail(STOKE_ERR_FORMAT, "%s:%zu:%zu: not valid YAML: %s%s%s", name,
                      p->problem_mark.line + 1, p->problem_mark.column + 1,
                      p->problem ? p->problem : "parse error", p->context ? " " : "",
                      p->context ? p->context : "");
}

static stoke_status check_events(const char *text, size_t len, const char *name,
                                 bool dash_is_underscore)
{
    scan *s = calloc(1, sizeof *s);
    yaml_parser_t p;
    if (!s || !yaml_parser_initialize(&p)) {
        free(s);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: cannot initialize the YAML parser", name);
    }
    s->name = name;
    s->dash_is_underscore = dash_is_underscore;
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    stoke_status st = STOKE_OK;
    int documents = 0;
    for (bool end = false; !end && st == STOKE_OK;) {
        yaml_event_t e;
        if (!yaml_parser_parse(&p, &e)) {
            st = parse_error(name, &p);
            break;
        }
        switch (e.type) {
        case YAML_DOCUMENT_START_EVENT:
            if (++documents > 1)
                st = stoke_fail(STOKE_ERR_FORMAT,
                                "%s:%zu:%zu: a second document (---): the "
                                "file holds one",
                                name, e.start_mark.line + 1, e.start_mark.column + 1);
            break;
        case YAML_SCALAR_EVENT:
        case YAML_ALIAS_EVENT:
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT: st = on_node(s, &e); break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT: {
            level *l = &s->lv[s->depth - 1];
            if (l->mapping)
                st = check_keys(s, l);
            level_clear(l);
            s->depth--;
            break;
        }
        case YAML_STREAM_END_EVENT: end = true; break;
        default: break;
        }
        yaml_event_delete(&e);
    }
    while (s->depth > 0)
        level_clear(&s->lv[--s->depth]);
    yaml_parser_delete(&p);
    free(s);
    return st;
}

stoke_status train_yaml_load(const char *text, size_t len, const char *name,
                             bool dash_is_underscore, yaml_document_t *doc)
{
    stoke_status st = check_events(text, len, name, dash_is_underscore);
    if (st != STOKE_OK)
        return st;
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return stoke_fail(STOKE_ERR_NOMEM, "%s: cannot initialize the YAML parser", name);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, doc))
        st = parse_error(name, &p);
    yaml_parser_delete(&p);
    return st;
}

stoke_status train_yaml_read_file(const char *path, const char *unopened, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    FILE *f;
    stoke_status os = stoke_fopen_regular(path, unopened, &f); /* never blocks on a FIFO */
    if (os != STOKE_OK)
        return os;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    stoke_status st = STOKE_OK;
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
        if (n == cap) {
            if (cap >= TRAIN_YAML_MAX_FILE) {
                st = stoke_fail(STOKE_ERR_FORMAT, "%s: larger than %u MB", path,
                                TRAIN_YAML_MAX_FILE >> 20);
                break;
            }
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (st == STOKE_OK && !buf)
        st = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", path);
    if (st == STOKE_OK && ferror(f))
        st = stoke_fail(STOKE_ERR_IO, "%s: read failed", path);
    fclose(f);
    if (st != STOKE_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return STOKE_OK;
}

bool train_yaml_is_null(const yaml_node_t *n)
{
    if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

const char *train_yaml_what(const yaml_node_t *n, char *buf, size_t size)
{
    if (!n || train_yaml_is_null(n))
        snprintf(buf, size, "nothing (null)");
    else if (n->type == YAML_MAPPING_NODE)
        snprintf(buf, size, "a mapping");
    else if (n->type == YAML_SEQUENCE_NODE)
        snprintf(buf, size, "a list");
    else
        snprintf(buf, size, "'%.*s'", size > 3 ? (int)(size - 3) : 0,
                 (const char *)n->data.scalar.value);
    return buf;
}

stoke_status train_yaml_fail(const char *file, const yaml_node_t *n, const char *field,
                             const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return stoke_fail(STOKE_ERR_FORMAT, "%s:%zu:%zu: %s: %s", file, n ? n->start_mark.line + 1 : 1,
                      n ? n->start_mark.column + 1 : 1, field, msg);
}
