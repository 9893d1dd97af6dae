/* cli_parse.h - the command line as tables.
 *
 * Each command declares its options as rows of a table: the names, the kind
 * of value, where the value goes (an offset into the command's options
 * struct, with the field's C type taken from the field itself), the range it
 * must fall in, a placeholder and a line of help. One parser (cli_parse) reads
 * argv against the rows and one printer renders `--help` from the same rows,
 * so an option cannot be accepted without being documented, nor documented
 * without being accepted.
 *
 * Rows live in sections (a title and a table); a command lists its sections.
 * Groups several commands share (the model, sampling, watermark and
 * constrained-output options of cli_options.h) are sections whose offsets are
 * relative to a struct the command embeds; the command's section entry gives
 * that struct's offset, so one table serves every command that includes it.
 *
 * Accepted forms: `--name value`, `--name=value`, `-n value`; `--` ends the
 * options (what follows is positional); `-h` / `--help` prints the help.
 * A value option always takes the next argument, even one starting with '-'
 * (so `--repeat-last-n -1` works). Errors name the option and what was
 * wrong: a missing value, a value that is not a number (trailing characters
 * included), a number outside the option's range (never clamped), a name
 * not in the list of an enum, an unknown option (with the closest name when
 * one is close). Usage errors exit with status 2. */
#ifndef NU_CLI_PARSE_H
#define NU_CLI_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit status after a usage error (an option, a missing argument). */
#define CLI_EXIT_USAGE 2
/* Exit status when a command's table itself is malformed (a bug). */
#define CLI_EXIT_TABLE 70

/* What an option's value is. */
typedef enum cli_kind {
    CLI_FLAG,   /* no value: stores 1 (true) in the field */
    CLI_UNSET,  /* no value: stores 0 (false), as --no-bos does */
    CLI_INT,    /* a decimal integer in [min, max] */
    CLI_FLOAT,  /* a finite number in [fmin, fmax] (open_min / open_max exclude a bound) */
    CLI_STRING, /* the argument itself (argv outlives the options) */
    CLI_ENUM,   /* one of the names of `choices`, stored as that choice's value */
    CLI_CUSTOM, /* `parse` turns the value into the field; takes a value when the row has
                   a placeholder */
} cli_kind;

/* The C type of a field, which the parser writes through. */
typedef enum cli_store {
    CLI_STORE_NONE, /* no field (or one only a CLI_CUSTOM parse knows) */
    CLI_STORE_BOOL,
    CLI_STORE_INT,    /* int, int32_t */
    CLI_STORE_UINT,   /* unsigned, and enums such as nu_kv_type */
    CLI_STORE_LONG,   /* long, int64_t */
    CLI_STORE_LLONG,  /* long long */
    CLI_STORE_ULONG,  /* unsigned long: size_t, uint64_t */
    CLI_STORE_ULLONG, /* unsigned long long */
    CLI_STORE_FLOAT,
    CLI_STORE_DOUBLE,
    CLI_STORE_TEXT, /* const char * */
} cli_store;

/* Where a value goes: an offset into the section's struct and the field's
 * type. offset is meaningful only when store is not CLI_STORE_NONE, or for
 * CLI_CUSTOM rows made with CLI_AT. */
typedef struct cli_field {
    size_t offset;
    cli_store store;
} cli_field;

/* The cli_store of an expression's type; a field of any other type does not
 * compile. */
#define CLI_STORE_OF(e)                                                                            \
    _Generic((e),                                                                                  \
        bool: CLI_STORE_BOOL,                                                                      \
        int: CLI_STORE_INT,                                                                        \
        unsigned: CLI_STORE_UINT,                                                                  \
        long: CLI_STORE_LONG,                                                                      \
        long long: CLI_STORE_LLONG,                                                                \
        unsigned long: CLI_STORE_ULONG,                                                           \
        unsigned long long: CLI_STORE_ULLONG,                                                      \
        float: CLI_STORE_FLOAT,                                                                    \
        double: CLI_STORE_DOUBLE,                                                                  \
        const char *: CLI_STORE_TEXT,                                                              \
        char *: CLI_STORE_TEXT)

/* The field `member` of struct `type` (nested members allowed: gen.n_predict). */
#define CLI_FIELD(type, member)                                                                    \
    { offsetof(type, member), CLI_STORE_OF(((type *)0)->member) }
/* A field of a type the parser does not write (for a CLI_CUSTOM parse). */
#define CLI_AT(type, member)                                                                       \
    { offsetof(type, member), CLI_STORE_NONE }
/* A repeatable option: the values go to successive elements of `array`, whose
 * length bounds how many may be given, and `count` counts them. Used inside
 * a row's initializer: {.name = "--stop", .kind = CLI_STRING,
 * CLI_LIST(generate_opts, stop, gen.n_stop), ...}. CLI_LIST_AT is the same
 * for elements only a CLI_CUSTOM parse knows how to fill. */
#define CLI_LIST_COMMON(type, array, count_member)                                                 \
    .count = CLI_FIELD(type, count_member),                                                        \
    .max_count = sizeof(((type *)0)->array) / sizeof(((type *)0)->array[0]),                       \
    .elem_size = sizeof(((type *)0)->array[0])
#define CLI_LIST(type, array, count_member)                                                        \
    .field = {offsetof(type, array), CLI_STORE_OF(((type *)0)->array[0])},                         \
    CLI_LIST_COMMON(type, array, count_member)
#define CLI_LIST_AT(type, array, count_member)                                                     \
    .field = {offsetof(type, array), CLI_STORE_NONE}, CLI_LIST_COMMON(type, array, count_member)

/* One name of a CLI_ENUM and the value it stands for. */
typedef struct cli_choice {
    const char *name;
    long long value;
} cli_choice;

/* A CLI_CUSTOM parse: reads value (NULL for a row without placeholder) into
 * target (the row's field, or the list element to fill). On failure writes
 * why (a phrase the parser prints after the option's name) and returns false. */
typedef bool (*cli_parse_fn)(void *target, const char *value, char *why, size_t why_cap);

/* One option. Only the members of its kind matter; the rest stay zero. */
typedef struct cli_option {
    const char *name;       /* "--top-k" */
    const char *short_name; /* "-k", "-np", or NULL */
    const char *alias;      /* another long name ("--temperature"), or NULL */
    cli_kind kind;
    cli_field field;           /* where the value goes, in the section's struct */
    long long min, max;        /* CLI_INT: the range, bounds included */
    double fmin, fmax;         /* CLI_FLOAT: the range */
    bool open_min, open_max;   /* CLI_FLOAT: fmin / fmax themselves are refused */
    bool nonempty;             /* CLI_STRING: "" is refused */
    const cli_choice *choices; /* CLI_ENUM: ended by {NULL} */
    cli_parse_fn parse;        /* CLI_CUSTOM */
    /* a repeatable option (CLI_LIST): field is an array of max_count
     * elements of elem_size bytes, count the number given so far */
    cli_field count;
    size_t max_count, elem_size;
    cli_field given;         /* a bool set to true when the option is given, or none */
    const char *placeholder; /* the value in the help ("N", "FILE"); NULL: takes no value */
    const char *help;        /* what it does, one phrase (wrapped by the printer) */
    /* The help appends "(default V)" with the field's initial value for
     * CLI_INT, CLI_FLOAT and CLI_ENUM rows; default_text replaces it with
     * "(default: TEXT)", no_default leaves it out. */
    const char *default_text;
    bool no_default;
} cli_option;

/* A titled group of rows. The rows' fields are offsets into a struct found
 * at `base` in the command's options. */
typedef struct cli_section {
    const char *title;         /* "sampling", or NULL for the command's own first group */
    const cli_option *options; /* ended by a row whose name is NULL */
    size_t base;
} cli_section;

/* The section `table` with its fields in member `member` of struct `type`. */
#define CLI_SECTION(title, table, type, member)                                                    \
    { title, table, offsetof(type, member) }
/* A section of the command's own options (fields in the command's struct). */
#define CLI_OWN_SECTION(title, table)                                                              \
    { title, table, 0 }

/* A required positional argument. */
typedef struct cli_positional {
    const char *name; /* "REF" */
    cli_field field;  /* a const char * field */
    const char *help;
} cli_positional;

typedef struct cli_command cli_command;

/* A command: its help text around the option tables, its options and
 * arguments, and how it runs; or a group of subcommands (nucleus itself,
 * nucleus watermark). */
struct cli_command {
    const char *name;            /* the words after "nucleus": "generate", "watermark detect"; NULL
                                    for nucleus itself. The last word is what selects it. */
    const char *summary;         /* one line in the list of commands */
    const char *usage;           /* "nucleus generate -m MODEL (-p PROMPT | -f FILE) [options]" */
    const char *about;           /* paragraphs before the options, or NULL */
    const cli_section *sections; /* ended by {NULL, NULL, 0}; NULL: none */
    const cli_positional *positionals;     /* ended by {NULL}; NULL: none */
    const char *epilog;                    /* text after the options, or NULL */
    const cli_command *const *subcommands; /* NULL-ended; NULL for a plain command */
    int (*run)(int argc, char **argv);     /* argv[0] is the command's last word */
};

/* Parses argv[1..argc) into opts (already holding the defaults) against the
 * command's tables. Returns true to go on; false when the command should end
 * with *exit_code: 0 after printing --help, CLI_EXIT_USAGE after printing a
 * usage error (one line on stderr). */
bool cli_parse(const cli_command *cmd, int argc, char **argv, void *opts, int *exit_code);

/* For a command made of subcommands: parses the options before the
 * subcommand's name into opts, then runs the subcommand with the arguments
 * from its name on. Returns the subcommand's exit status; 0 after --help;
 * CLI_EXIT_USAGE after an unknown subcommand (with the closest name) or a
 * bad option; CLI_NO_SUBCOMMAND when the options were fine but no
 * subcommand was named (the caller decides). */
#define CLI_NO_SUBCOMMAND (-1)
int cli_dispatch(const cli_command *cmd, int argc, char **argv, void *opts);

/* Writes the command's help: usage, about, each section's rows (names,
 * placeholder, help, default, range), positional arguments, subcommands,
 * epilog. opts holds the defaults shown. */
void cli_print_help(const cli_command *cmd, const void *opts, FILE *out);

/* The known name closest to `word` (by edit distance, or the one name it
 * begins), or NULL when none is close enough to be a likely typo. */
const char *cli_closest(const char *word, const char *const *names, size_t n);

#endif
