/* SPDX-License-Identifier: MIT */
/*
 * prep_schema: the instance's schema generation (SPEC §5), in the shared
 * segment (or the worker when there is none), and which CommandComplete
 * tags start a new one. Statements are prepared afresh in each
 * generation (prep_registry_get).
 */
#include "prep_internal.h"

#include <string.h>

#include "log.h"
#include "shm.h"
#include "context.h"

uint64_t prep_schema_generation(const struct worker *w)
{
	return w->shm ? shm_schema_generation(w->shm) : w->schema_gen;
}

void prep_schema_changed(struct worker *w, const char *why)
{
	uint64_t g = w->shm ? shm_schema_generation_bump(w->shm) : ++w->schema_gen;
	log_debug("schema generation %llu: %s", (unsigned long long)g, why);
}

static bool tag_starts(const char *tag, size_t len, const char *word)
{
	size_t n = strlen(word);
	return len >= n && memcmp(tag, word, n) == 0;
}

bool prep_tag_changes_schema(const char *tag, size_t len)
{
	/* Every CommandComplete of a prepared-statement server comes here
	 * (SELECT, INSERT, COMMIT...): one switch on the first letter. */
	if (len == 0)
		return false;
	switch (tag[0]) {
	case 'A':
		return tag_starts(tag, len, "ALTER ");
	case 'C':
		return tag_starts(tag, len, "CREATE ") || tag_starts(tag, len, "COMMENT");
	case 'D':
		return tag_starts(tag, len, "DROP ") || tag_starts(tag, len, "DISCARD ALL") ||
		       tag_starts(tag, len, "DEALLOCATE ALL");
	case 'G':
		return tag_starts(tag, len, "GRANT");
	case 'I':
		return tag_starts(tag, len, "IMPORT FOREIGN SCHEMA");
	case 'R':
		return tag_starts(tag, len, "REVOKE");
	case 'S':
		return tag_starts(tag, len, "SECURITY LABEL");
	case 'T':
		return tag_starts(tag, len, "TRUNCATE");
	default:
		return false;
	}
}
