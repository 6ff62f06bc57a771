/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the auth_hba_file parser and its matching. The input is
 * the file's text. A parse that fails reported at least one bad line, on a
 * line the text has, and kept no rule; one that succeeds kept rules on lines
 * the text has, in order, with names of at most 63 bytes; and matching a
 * few logins against them (unix, TCP with and without TLS, IPv4 and IPv6)
 * returns one of those rules or none.
 */
#include "hba.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
	int bad;
};

static void bad(void *arg, int line, const char *why)
{
	struct seen *s = arg;
	CHECK(why != NULL && why[0]);
	CHECK(line >= 1 && line <= s->lines);
	s->bad++;
}

static void check_names(const struct hba_names *nm)
{
	for (size_t i = 0; i < nm->n; i++)
		CHECK(nm->names[i][0] != '\0' && strlen(nm->names[i]) <= 63);
}

static void try_logins(const struct hba *h)
{
	static const char *const names[] = { "all", "app", "appdb", "pgcat", "replication", "My DB" };
	uint8_t v4[4] = { 127, 0, 0, 1 }, v6[16] = { 0 };
	v6[15] = 1;
	for (int k = 0; k < 8; k++) {
		struct hba_login l = {
			.is_unix = k == 0, .tls = (k & 1) != 0, .family = k < 4 ? AF_INET : AF_INET6,
			.addr = k < 4 ? (const void *)v4 : (const void *)v6,
			.database = names[k % 6], .user = names[(k + 1) % 6],
		};
		const struct hba_rule *r = hba_match(h, &l);
		CHECK(r == NULL || (r >= h->rules && r < h->rules + h->n));
		if (r)
			CHECK(hba_method_name(r->method)[0] != '?');
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size ? size : 1);   /* exact size: no terminator to lean on */
	if (!text)
		return 0;
	memcpy(text, data, size);
	struct seen s = { 1, 0 };
	for (size_t i = 0; i < size; i++)
		s.lines += text[i] == '\n';
	struct hba h;
	enum hba_parse_result r = hba_parse(text, size, &h, bad, &s);
	if (r == HBA_PARSE_BAD) {
		CHECK(s.bad > 0);
		CHECK(h.n == 0 && h.rules == NULL);
	} else if (r == HBA_PARSE_OK) {
		CHECK(s.bad == 0);
		for (size_t k = 0; k < h.n; k++) {
			CHECK(h.rules[k].line >= 1 && h.rules[k].line <= s.lines);
			CHECK(k == 0 || h.rules[k].line > h.rules[k - 1].line);
			check_names(&h.rules[k].db);
			check_names(&h.rules[k].user);
		}
		try_logins(&h);
		hba_free(&h);
	}
	free(text);
	return 0;
}
