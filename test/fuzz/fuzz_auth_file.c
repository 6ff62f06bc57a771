/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the auth_file (userlist.txt) parser. The input is the
 * file's text. Every entry it keeps has a user name, is found again by
 * auth_file_find, holds fields shorter than the limit, and sits on a line
 * the text has; every skipped line is reported with a reason.
 */
#include "auth_file.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, \
				__FILE__, __LINE__);                             \
			abort();                                                 \
		}                                                                \
	} while (0)

struct seen {
	int lines;
};

static void bad(void *arg, int line, const char *why)
{
	struct seen *s = arg;
	CHECK(why != NULL && why[0]);
	CHECK(line >= 1 && line <= s->lines);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size ? size : 1);   /* exact size: no terminator to lean on */
	if (!text)
		return 0;
	memcpy(text, data, size);
	struct seen s = { 1 };
	for (size_t i = 0; i < size; i++)
		s.lines += text[i] == '\n';
	struct auth_file af;
	if (auth_file_parse(text, size, &af, bad, &s)) {
		for (size_t k = 0; k < af.n; k++) {
			const struct auth_file_entry *e = &af.entries[k];
			CHECK(e->user[0] != '\0');
			CHECK(strlen(e->user) < AUTH_FILE_MAX_FIELD && strlen(e->secret) < AUTH_FILE_MAX_FIELD);
			CHECK(e->line >= 1 && e->line <= s.lines);
			CHECK(auth_file_find(&af, e->user) == e);
		}
		auth_file_free(&af);
	}
	free(text);
	return 0;
}
