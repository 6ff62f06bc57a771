/* SPDX-License-Identifier: MIT */
/*
 * list: an intrusive circular doubly-linked list. Objects embed a struct
 * list_node per list they can be on; moving between lists never allocates.
 */
#ifndef PGCAT_LIST_H
#define PGCAT_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_node {
	struct list_node *prev, *next;
};

#define LIST_OWNER(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

static inline void list_init(struct list_node *head) { head->prev = head->next = head; }
static inline bool list_empty(const struct list_node *head) { return head->next == head; }
/* A node that is on no list points to itself (after list_init or list_del). */
static inline bool list_linked(const struct list_node *n) { return n->next != n; }

static inline void list_add_tail(struct list_node *head, struct list_node *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

static inline void list_add_head(struct list_node *head, struct list_node *n)
{
	n->next = head->next;
	n->prev = head;
	head->next->prev = n;
	head->next = n;
}

static inline void list_del(struct list_node *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->prev = n->next = n;
}

static inline struct list_node *list_first(const struct list_node *head)
{
	return list_empty(head) ? NULL : head->next;
}

static inline struct list_node *list_last(const struct list_node *head)
{
	return list_empty(head) ? NULL : head->prev;
}

#define LIST_FOREACH_SAFE(pos, tmp, head) \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

#endif
