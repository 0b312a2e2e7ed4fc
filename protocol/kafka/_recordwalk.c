/* The records of an uncompressed Kafka v2 batch, walked once in C.
 *
 * A record's fields lie one after another, each where the previous varint or
 * bytes end, so finding them is a chain of dependent reads: per-record work that
 * Python does at ~1 us a record and C at a few ns. Two entry points share one walk:
 *
 *   summarize(data, count) -> (min timestamp delta, max timestamp delta,
 *                              index of the first null key or -1,
 *                              index of the first offset delta != its index or -1)
 *   columns(data, count)   -> bytes holding count rows of COLUMNS native int64s
 *   transcode(data, count) -> the records as Tidelog's msgpack payload (docs/protocol.md
 *                             §3), for msgspec to decode straight into records: no
 *                             intermediate Python object per record
 *
 * Input is hostile: every varint is bounded by its width (5 bytes for a varint,
 * 10 for a varlong, no bits past 32 or 64) and by its record's end, every length
 * is -1 or non-negative (keys, values, header values; header keys and counts may
 * not be negative at all) and inside its record, a record ends exactly where its
 * length says, the last one where the data ends, and header keys are strict
 * UTF-8 (as Python's str(key, "utf-8") decodes them). Any failure is ValueError
 * naming the record. The reference is protocol/kafka/recordwalk.py's walk_each.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Per record, in order: offset delta, timestamp delta, key start, key length,
 * value start, value length, headers start, header count, record end (positions
 * are byte offsets into the data; a length of -1 is null). */
#define COLUMNS 9
/* length, attributes, timestamp delta, offset delta, key length, value length and
 * header count: one byte each at least. */
#define MIN_RECORD_BYTES 7
/* Batches at least this many records walk without the GIL. */
#define NOGIL_MIN_RECORDS 256

typedef struct {
    const uint8_t *data;
    Py_ssize_t pos;
    Py_ssize_t record; /* index of the record being read, for messages */
    char error[160];
} Walk;

static int fail(Walk *w, const char *what) {
    snprintf(w->error, sizeof w->error, "record %zd: %s (at byte %zd)", w->record, what, w->pos);
    return -1;
}

/* A zigzag varint of at most `width` bytes (5 or 10) ending by `end`: the general case. */
static int read_varint_long(Walk *w, Py_ssize_t end, int width, int64_t *out, const char *field) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t pos = w->pos;
    for (int i = 0; i < width; i++) {
        if (pos >= end) {
            char what[80];
            snprintf(what, sizeof what, "%s runs past the record", field);
            return fail(w, what);
        }
        uint8_t byte = w->data[pos++];
        if (i == 9 && byte > 1) {
            char what[80];
            snprintf(what, sizeof what, "%s overflows 64 bits", field);
            return fail(w, what);
        }
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            if (width == 5 && raw >> 32) {
                char what[80];
                snprintf(what, sizeof what, "%s overflows 32 bits", field);
                return fail(w, what);
            }
            w->pos = pos;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    char what[80];
    snprintf(what, sizeof what, "%s is longer than %d bytes", field, width);
    return fail(w, what);
}

/* A zigzag varint: one byte (most lengths and deltas) inline, longer ones above. */
static inline int read_varint(Walk *w, Py_ssize_t end, int width, int64_t *out, const char *field) {
    if (w->pos < end) {
        uint8_t byte = w->data[w->pos];
        if (byte < 0x80) {
            w->pos++;
            *out = (int64_t)(byte >> 1) ^ -(int64_t)(byte & 1);
            return 0;
        }
        if (w->pos + 1 < end && w->data[w->pos + 1] < 0x80) { /* two bytes: 14 bits */
            uint64_t raw = (uint64_t)(byte & 0x7F) | ((uint64_t)w->data[w->pos + 1] << 7);
            w->pos += 2;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return read_varint_long(w, end, width, out, field);
}

/* A length that may be -1 (null) and whose bytes must lie before `end`: moves past them. */
static int skip_bytes(Walk *w, Py_ssize_t end, int64_t *length, int nullable, const char *field) {
    if (read_varint(w, end, 5, length, field) < 0)
        return -1;
    if (*length < (nullable ? -1 : 0)) {
        char what[80];
        snprintf(what, sizeof what, "%s %lld", field, (long long)*length);
        return fail(w, what);
    }
    if (*length > end - w->pos) {
        char what[80];
        snprintf(what, sizeof what, "%s %lld runs past the record", field, (long long)*length);
        return fail(w, what);
    }
    if (*length > 0)
        w->pos += (Py_ssize_t)*length;
    return 0;
}

/* Strict UTF-8 (Unicode's well-formed sequences: no overlongs, surrogates or
 * code points past U+10FFFF), what Python's strict decoder accepts. */
static int utf8_ok(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int extra;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            extra = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2;
            if (c == 0xE0)
                lo = 0xA0;
            if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i <= extra)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int k = 2; k <= extra; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += extra + 1;
    }
    return 1;
}

/* Where transcode's msgpack goes: `out` NULL only counts the bytes (the sizing pass).
 * Nothing is written past `cap`: a bytearray changed by another thread between the
 * two passes (the walk may run without the GIL) cannot overrun the output. */
typedef struct {
    uint8_t *out;
    Py_ssize_t n, cap;
} Writer;

static inline int room(const Writer *o, Py_ssize_t k) {
    return o->out != NULL && k <= o->cap - o->n;
}

static inline void put_byte(Writer *o, uint8_t b) {
    if (room(o, 1))
        o->out[o->n] = b;
    o->n++;
}

static inline void put_be(Writer *o, uint64_t v, int bytes) {
    if (room(o, bytes))
        for (int k = 0; k < bytes; k++)
            o->out[o->n + k] = (uint8_t)(v >> (8 * (bytes - 1 - k)));
    o->n += bytes;
}

/* msgpack's smallest forms, as msgspec's encoder writes them (protocol.batch.encode_payload). */
static inline void put_array(Writer *o, uint64_t n) {
    if (n < 16) {
        put_byte(o, (uint8_t)(0x90 | n));
    } else if (n < 65536) {
        put_byte(o, 0xdc);
        put_be(o, n, 2);
    } else {
        put_byte(o, 0xdd);
        put_be(o, n, 4);
    }
}

static inline void put_int(Writer *o, int64_t x) {
    if (x >= 0) {
        if (x < 128) {
            put_byte(o, (uint8_t)x);
        } else if (x < 256) {
            put_byte(o, 0xcc);
            put_be(o, (uint64_t)x, 1);
        } else if (x < 65536) {
            put_byte(o, 0xcd);
            put_be(o, (uint64_t)x, 2);
        } else if (x <= 0xFFFFFFFFLL) {
            put_byte(o, 0xce);
            put_be(o, (uint64_t)x, 4);
        } else {
            put_byte(o, 0xcf);
            put_be(o, (uint64_t)x, 8);
        }
    } else if (x >= -32) {
        put_byte(o, (uint8_t)x);
    } else if (x >= -128) {
        put_byte(o, 0xd0);
        put_be(o, (uint64_t)x & 0xFF, 1);
    } else if (x >= -32768) {
        put_byte(o, 0xd1);
        put_be(o, (uint64_t)x & 0xFFFF, 2);
    } else if (x >= -2147483648LL) {
        put_byte(o, 0xd2);
        put_be(o, (uint64_t)x & 0xFFFFFFFFULL, 4);
    } else {
        put_byte(o, 0xd3);
        put_be(o, (uint64_t)x, 8);
    }
}

static inline void put_raw(Writer *o, const uint8_t *src, Py_ssize_t n) {
    if (n > 0 && room(o, n))
        memcpy(o->out + o->n, src, (size_t)n);
    o->n += n;
}

/* bin (or nil for a length of -1). */
static inline void put_bin(Writer *o, const uint8_t *src, int64_t n) {
    if (n < 0) {
        put_byte(o, 0xc0);
        return;
    }
    if (n < 256) {
        put_byte(o, 0xc4);
        put_be(o, (uint64_t)n, 1);
    } else if (n < 65536) {
        put_byte(o, 0xc5);
        put_be(o, (uint64_t)n, 2);
    } else {
        put_byte(o, 0xc6);
        put_be(o, (uint64_t)n, 4);
    }
    put_raw(o, src, (Py_ssize_t)n);
}

static inline void put_str(Writer *o, const uint8_t *src, int64_t n) {
    if (n < 32) {
        put_byte(o, (uint8_t)(0xa0 | n));
    } else if (n < 256) {
        put_byte(o, 0xd9);
        put_be(o, (uint64_t)n, 1);
    } else if (n < 65536) {
        put_byte(o, 0xda);
        put_be(o, (uint64_t)n, 2);
    } else {
        put_byte(o, 0xdb);
        put_be(o, (uint64_t)n, 4);
    }
    put_raw(o, src, (Py_ssize_t)n);
}

typedef struct {
    int64_t min_ts, max_ts, first_null_key, first_misplaced;
} Summary;

/* Walk `count` records of data[0:size]; `rows` (count * COLUMNS) and `o` (each
 * record as msgpack [offset delta, timestamp delta, key, value, [[key, value], ...]])
 * may be NULL. */
static int walk_records(Walk *w, Py_ssize_t size, Py_ssize_t count, Summary *s, int64_t *rows,
                        Writer *o) {
    s->min_ts = INT64_MAX;
    s->max_ts = INT64_MIN;
    s->first_null_key = -1;
    s->first_misplaced = -1;
    w->pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts, offset, key_len, value_len, headers, ignored;
        w->record = i;
        if (read_varint(w, size, 5, &length, "length") < 0)
            return -1;
        if (length < 0)
            return fail(w, "negative length");
        if (length > size - w->pos)
            return fail(w, "length runs past the records");
        Py_ssize_t end = w->pos + (Py_ssize_t)length;
        if (w->pos >= end)
            return fail(w, "attributes byte runs past the record");
        w->pos++; /* record attributes: unused in v2 */
        if (read_varint(w, end, 10, &ts, "timestamp delta") < 0 ||
            read_varint(w, end, 5, &offset, "offset delta") < 0)
            return -1;
        Py_ssize_t key_start;
        if (skip_bytes(w, end, &key_len, 1, "key length") < 0)
            return -1;
        key_start = w->pos - (key_len > 0 ? (Py_ssize_t)key_len : 0);
        Py_ssize_t value_start;
        if (skip_bytes(w, end, &value_len, 1, "value length") < 0)
            return -1;
        value_start = w->pos - (value_len > 0 ? (Py_ssize_t)value_len : 0);
        if (read_varint(w, end, 5, &headers, "header count") < 0)
            return -1;
        if (headers < 0)
            return fail(w, "negative header count");
        if (headers > (end - w->pos) / 2)
            return fail(w, "header count runs past the record");
        Py_ssize_t headers_start = w->pos;
        if (o != NULL) {
            put_array(o, 5);
            put_int(o, offset);
            put_int(o, ts);
            put_bin(o, w->data + key_start, key_len);
            put_bin(o, w->data + value_start, value_len);
            put_array(o, (uint64_t)headers);
        }
        for (int64_t h = 0; h < headers; h++) {
            int64_t key_size;
            if (skip_bytes(w, end, &key_size, 0, "header key length") < 0)
                return -1;
            const uint8_t *header_key = w->data + w->pos - key_size;
            if (!utf8_ok(header_key, (Py_ssize_t)key_size))
                return fail(w, "header key is not UTF-8");
            if (skip_bytes(w, end, &ignored, 1, "header value length") < 0)
                return -1;
            if (o != NULL) {
                put_array(o, 2);
                put_str(o, header_key, key_size);
                put_bin(o, w->data + w->pos - (ignored > 0 ? ignored : 0), ignored);
            }
        }
        if (w->pos != end)
            return fail(w, "fields end before the record's length");
        if (ts < s->min_ts)
            s->min_ts = ts;
        if (ts > s->max_ts)
            s->max_ts = ts;
        if (key_len < 0 && s->first_null_key < 0)
            s->first_null_key = i;
        if (offset != i && s->first_misplaced < 0)
            s->first_misplaced = i;
        if (rows != NULL) {
            int64_t *row = rows + i * COLUMNS;
            row[0] = offset;
            row[1] = ts;
            row[2] = key_start;
            row[3] = key_len;
            row[4] = value_start;
            row[5] = value_len;
            row[6] = headers_start;
            row[7] = headers;
            row[8] = end;
        }
    }
    if (w->pos != size) {
        snprintf(w->error, sizeof w->error, "%zd bytes follow the batch's %zd records",
                 size - w->pos, count);
        return -1;
    }
    return 0;
}

/* Parse (buffer, count), check the count against the size; walk with or without rows. */
static int run(PyObject *args, Walk *w, Summary *s, PyObject **rows_out) {
    Py_buffer view;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &view, &count))
        return -1;
    w->data = (const uint8_t *)view.buf;
    w->error[0] = 0;
    int status = 0;
    if (count < 0 || count > view.len / MIN_RECORD_BYTES) {
        PyErr_Format(PyExc_ValueError, "batch claims %zd records in %zd bytes", count, view.len);
        PyBuffer_Release(&view);
        return -1;
    }
    int64_t *rows = NULL;
    if (rows_out != NULL) {
        *rows_out = PyBytes_FromStringAndSize(NULL, count * COLUMNS * (Py_ssize_t)sizeof(int64_t));
        if (*rows_out == NULL) {
            PyBuffer_Release(&view);
            return -1;
        }
        rows = (int64_t *)PyBytes_AS_STRING(*rows_out);
    }
    if (count >= NOGIL_MIN_RECORDS) {
        Py_BEGIN_ALLOW_THREADS
        status = walk_records(w, view.len, count, s, rows, NULL);
        Py_END_ALLOW_THREADS
    } else {
        status = walk_records(w, view.len, count, s, rows, NULL);
    }
    PyBuffer_Release(&view);
    if (status < 0) {
        PyErr_SetString(PyExc_ValueError, w->error);
        if (rows_out != NULL)
            Py_CLEAR(*rows_out);
        return -1;
    }
    return 0;
}

static PyObject *summarize(PyObject *self, PyObject *args) {
    (void)self;
    Walk w;
    Summary s;
    if (run(args, &w, &s, NULL) < 0)
        return NULL;
    if (s.min_ts > s.max_ts) /* no records */
        s.min_ts = s.max_ts = 0;
    return Py_BuildValue("(LLLL)", (long long)s.min_ts, (long long)s.max_ts,
                         (long long)s.first_null_key, (long long)s.first_misplaced);
}

static PyObject *columns(PyObject *self, PyObject *args) {
    (void)self;
    Walk w;
    Summary s;
    PyObject *rows = NULL;
    if (run(args, &w, &s, &rows) < 0)
        return NULL;
    return rows;
}

/* Both passes of transcode: size (o->out NULL), then write; without the GIL for big batches. */
static int walk_into(Walk *w, Py_ssize_t size, Py_ssize_t count, Writer *o) {
    Summary s;
    int status;
    put_array(o, (uint64_t)count);
    if (count >= NOGIL_MIN_RECORDS) {
        Py_BEGIN_ALLOW_THREADS
        status = walk_records(w, size, count, &s, NULL, o);
        Py_END_ALLOW_THREADS
    } else {
        status = walk_records(w, size, count, &s, NULL, o);
    }
    return status;
}

static PyObject *transcode(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &view, &count))
        return NULL;
    Walk w;
    w.data = (const uint8_t *)view.buf;
    w.error[0] = 0;
    if (count < 0 || count > view.len / MIN_RECORD_BYTES) {
        PyErr_Format(PyExc_ValueError, "batch claims %zd records in %zd bytes", count, view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    Writer sizing = {NULL, 0, 0};
    PyObject *out = NULL;
    if (walk_into(&w, view.len, count, &sizing) == 0) {
        out = PyBytes_FromStringAndSize(NULL, sizing.n);
        if (out != NULL) {
            Writer writing = {(uint8_t *)PyBytes_AS_STRING(out), 0, sizing.n};
            /* The data passed the sizing walk; only a buffer changed meanwhile fails here. */
            if (walk_into(&w, view.len, count, &writing) < 0 || writing.n != sizing.n) {
                PyErr_SetString(PyExc_ValueError, "records changed while being read");
                Py_CLEAR(out);
            }
        }
    } else {
        PyErr_SetString(PyExc_ValueError, w.error);
    }
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"summarize", summarize, METH_VARARGS,
     "summarize(data, count) -> (min_ts_delta, max_ts_delta, first_null_key, first_misplaced)\n\n"
     "Walk count records of uncompressed Kafka v2 record bytes, checking every bound\n"
     "(ValueError names the record). first_*: a record index or -1."},
    {"columns", columns, METH_VARARGS,
     "columns(data, count) -> bytes of count rows of 9 native int64s: offset delta,\n"
     "timestamp delta, key start, key length, value start, value length, headers start,\n"
     "header count, record end. The same walk and checks as summarize."},
    {"transcode", transcode, METH_VARARGS,
     "transcode(data, count) -> the count records as Tidelog's msgpack payload: an array of\n"
     "[offset delta, timestamp delta, key, value, [[header key, header value], ...]]\n"
     "(bytes or nil), byte for byte what protocol.batch.encode_payload writes for the\n"
     "same record tuples. The same walk and checks as summarize."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordwalk",
    "Kafka v2 records walked in C: the bounds-checked hot loop of protocol/kafka/recordwalk.py.",
    0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__recordwalk(void) {
    PyObject *m = PyModuleDef_Init(&module);
    return m;
}
