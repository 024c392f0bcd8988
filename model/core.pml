/*
 * payment-service: what the models of the idempotency protocol share, once.
 * model/payment.pml (the charge) and model/refund.pml (the refund) run the
 * same core (internal/app/idempotent_command.go): a record per key, claimed,
 * leased, fenced by its lock token, completed, released or purged, replicas
 * that crash, locks that expire, and the same kinds of fault. Each model
 * includes this file after its scenarios, which define NCLI (clients),
 * NKEY (keys), TOK_COMPLETER and NTOK (lock tokens), and RECOVERY, the name
 * of the record's recovery-point column (payid, rid). Its processes that
 * are the same (the client, the environment) are in model/core-processes.pml.
 * docs/model.md explains both models.
 */

/* --------------------------------------------------------- fault budget */

/* Each kind of fault may happen at most its own number of times, and all
 * kinds together at most MAXFAULTS times, in one run. */
#ifndef MAXFAULTS
#define MAXFAULTS 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 1     /* replica crashes (each kills every attempt on it) */
#endif
#ifndef MAXSLOW
#define MAXSLOW 1      /* locks that expire while their owner still works */
#endif
#ifndef MAXLOST
#define MAXLOST 1      /* provider answers lost after the provider decided */
#endif
#ifndef MAXDNC
#define MAXDNC 1       /* provider calls refused, nothing done for now */
#endif
#ifndef MAXREFUSE
#define MAXREFUSE 1    /* external ids (payments, refunds) the provider refuses for good */
#endif
#ifndef MAXDBFAIL
#define MAXDBFAIL 1    /* phase-3 statements that fail (database down) */
#endif
#ifndef MAXPURGE
#define MAXPURGE 1     /* TTL purges (not a fault; each deletes one record) */
#endif
#ifndef MAXATT
#define MAXATT 2       /* attempts per client, without LIVENESS */
#endif
#define MAY(cnt, max) ((cnt) < (max) && faults < MAXFAULTS)
#define FAULT(cnt) cnt++; faults++

/* ----------------------------------------------------- the provider's kind */

/* What the provider lets the outcome model learn of a call whose answer it
 * lacks (ProviderAbilities.Recovery, internal/app/provider_abilities.go;
 * docs/model.md, "The provider kinds"):
 *   PKIND=1  LooksUpWithinBound, the sandbox (the default): a lookup by key
 *            answers truthfully, and the provider refuses a request older
 *            than B; nothing under the key after a refusal for good is
 *            FAILED once B has passed since the claim.
 *   PKIND=2  LooksUp, Stripe: a lookup answers truthfully, but the provider
 *            acts on a request however late it arrives, so nothing found
 *            proves nothing: the outcome stays unknown.
 *   PKIND=3  NotifiesOnly, Adyen: the provider cannot be asked; a resumed
 *            refusal, for good or for now, is unknown at once, until a
 *            retry gets a decision or the provider's event records it.
 * Its mutants, each a guess the kind does not support:
 *   UNBOUNDGUESS  (with PKIND=2) the bounded kind's rule at a provider
 *                 without a bound: the adapter declares a request bound the
 *                 provider does not enforce, and nothing found once it has
 *                 passed is recorded FAILED (caught with REFUSEONCE: a
 *                 refusal that binds every later request refuses the late
 *                 one too)
 *   NOTIFYGUESS   (with PKIND=3) a resumed refusal for good is recorded
 *                 FAILED, since nothing can be asked: the refusal taken as
 *                 proof */
#ifndef PKIND
#define PKIND 1
#endif
#if PKIND < 1 || PKIND > 3
#error "PKIND must be 1, 2 or 3"
#endif
/* The core waits out a bound after a resumed refusal: at the bounded kind,
 * and where the adapter declares one the provider does not enforce. */
#if PKIND == 1 || defined(UNBOUNDGUESS)
#define CORE_WAITS 1
#else
#define CORE_WAITS 0
#endif

/* ------------------------------------------------------------ constants */

/* idempotency_record.status; NONE = no row */
#define NONE       0
#define INPROG     1
#define COMPLETED  2
/* payment.status and refund.status; NONE = no row */
#define PENDING    1
#define SUCCEEDED  2
#define DECLINED   3
#define FAILED     4   /* refused for good, nothing under its provider key: final */
/* the provider port's answer */
#define R_WAIT     0
#define R_APPROVED 1
#define R_DECLINED 2
#define R_DNC      3   /* refused, nothing done for now (ErrProviderNotCharged) */
#define R_UNKNOWN  4
#define R_REFUSED  5   /* refused for good, nothing done (ErrProviderRefused) */
#define R_FAIL     6   /* settled: record it FAILED */

/* ---------------------------------------------------------------- state */

typedef Rec {
	byte st;       /* NONE, INPROG, COMPLETED */
	byte hash;     /* command_hash */
	byte tok;      /* lock_token; 0 = NULL */
	bit  exp;      /* locked_until < now */
	byte RECOVERY; /* payment_id or refund_id: E or X + 1; 0 = NULL (the recovery point) */
	byte resp      /* response: an A_ code */
};

Rec  rec[NKEY];    /* idempotency_record, primary key (client_id, key) */

/* The bound B on a request's age (PROVIDER_MAX_REQUEST_AGE): the provider
 * acts on a request only within B of its sending. An attempt sends while its
 * claim's lock is live, and a takeover claims the key only after the
 * previous claim's lock ended, so once B has passed since a takeover no
 * earlier attempt's request can still reach the provider. window[k]: B has
 * not passed since the latest takeover of key k. A takeover opens it (the
 * claim's write), B passing closes it (below, "the bound on a request's
 * age"). */
bit  window[NKEY];

bool kill[NTOK];   /* this attempt dies with its replica at its next step */
byte crashes, slow, lost, dnc, refusals, dbfail, purges, faults;

/* ghosts: not in the system, only for the properties and the environment */
byte holder[NKEY];       /* the attempt that made the key's latest claim */
bool owner_alive[NKEY];  /* ... and it is still running */
bool alive[NTOK];        /* the attempt with this token is running */
byte clients_done;       /* clients that stopped */
byte nfinal;             /* clients that got a final answer */
bool completer_done;
byte calls[NTOK];        /* the key (+ 1) whose provider call attempt t has still
                          * to make or to settle (0: none) */
bool waiting[NTOK];      /* attempt t waits for B to pass since its claim */

/* A per-key condition on any key, and the choice of a key that meets it. */
#if NKEY == 3
#define ANY_KEY(P) (P(0) || P(1) || P(2))
#define PICK_KEY(P, k) \
	if \
	:: P(0) -> k = 0 \
	:: P(1) -> k = 1 \
	:: P(2) -> k = 2 \
	fi
#else
#define ANY_KEY(P) (P(0) || P(1))
#define PICK_KEY(P, k) \
	if \
	:: P(0) -> k = 0 \
	:: P(1) -> k = 1 \
	fi
#endif

/* ----------------------------------------------------------- properties */

/* A violated property prints its name (seen when the trail is replayed with
 * spin -t) before the assertion fails. */
#define PROP(msg, cond) \
	if \
	:: !(cond) -> printf(msg); assert(cond) \
	:: else -> skip \
	fi

/* Reachability witnesses: with -DWITNESS=n the run stops with an error the
 * first time event n happens; scripts/model-check.sh expects it to. */
#ifdef WITNESS
#define SEEN(n) \
	if \
	:: WITNESS == (n) -> printf("WITNESS %d reached\n", n); assert(WITNESS != (n)) \
	:: else -> skip \
	fi
#else
#define SEEN(n) skip
#endif

/* --------------------------------------------- the record's statements */

/* The fence of every write after the claim: WHERE lock_token = mine AND
 * status = 'IN_PROGRESS'. */
#ifndef NOFENCE
#define OWNED(k, me) (rec[k].st == INPROG && rec[k].tok == (me))
#else
#define OWNED(k, me) (rec[k].st == INPROG)
#endif

/* The claim's write: the INSERT, or the DO UPDATE of a takeover (which
 * opens the key's window: an earlier attempt's request may still be on its
 * way). CLAIM_CHECK(k) is the model's check before it. */
#define CLAIM_WRITE(k, me, h, p) \
	CLAIM_CHECK(k); \
	WINDOW_OPENS(k); \
	rec[k].st = INPROG; rec[k].hash = h; rec[k].tok = me; rec[k].exp = 0; \
	rec[k].RECOVERY = p; rec[k].resp = A_NONE; holder[k] = me; owner_alive[k] = 1

/* Complete: the outcome is stored, the lock columns go NULL. */
#define COMPLETE_WRITE(k, r) \
	rec[k].st = COMPLETED; rec[k].resp = r; rec[k].tok = 0; rec[k].exp = 0

#define DELETE_RECORD(k) \
	rec[k].st = NONE; rec[k].hash = 0; rec[k].tok = 0; rec[k].exp = 0; \
	rec[k].RECOVERY = 0; rec[k].resp = 0

/* --------------------------------------------------------- the attempts */

/* An attempt starts on some replica. Its replica may crash at any step: the
 * attempt then ends (the unless clause), and if it made the key's latest
 * claim, that claim's owner is gone, so its lock may expire at any time. */
#define ATTEMPT_STARTS(me) d_step { alive[me] = 1; ans = A_CRASH }
#define ATTEMPT_ENDS(k, me) \
	alive[me] = 0; CALL_SETTLED(k, me); \
	if \
	:: holder[k] == (me) -> owner_alive[k] = 0 \
	:: else -> skip \
	fi

/* ------------------------------------------ the bound on a request's age */

/* B passing since a takeover of key k ("window[k] = 0") is time, an event
 * that may come at any moment. It changes only what the attempts that look
 * at it do: the call of an attempt whose claim was taken over (too old or
 * not) and the wait of the key's owner. So the model takes it only there:
 * such a call may find that it has passed (TOO_OLD: it passes now, if it
 * had not), and while an owner waits the environment may take it
 * (IN_WINDOW, model/core-processes.pml). Moved to the next moment one of
 * them looks, an event that comes earlier changes nothing. */

/* A takeover's claim opens the key's window where the core waits for B;
 * elsewhere nothing reads it, and it stays closed. */
#if CORE_WAITS
#define WINDOW_OPENS(k) window[k] = (rec[k].st == INPROG -> 1 : window[k])
#else
#define WINDOW_OPENS(k) skip
#endif

/* The provider refuses as too old the call of an attempt whose claim was
 * taken over once B has passed since the key's latest takeover: not
 * charged, nothing recorded under the key. Until then it may still reach
 * the provider (ON_TIME). A provider without a bound acts on a request
 * however late it arrives. */
#if PKIND == 1
#define TOO_OLD(k, me) (holder[k] != (me))
#define ON_TIME(k, me) (holder[k] == (me) || window[k])
#else
#define TOO_OLD(k, me) false
#define ON_TIME(k, me) true
#endif

/* A resumed attempt refused for good whose lookup found nothing under the
 * key records FAILED only once B has passed since its own claim (the key's
 * latest takeover: it holds the claim); before, it waits. NOWAIT is the
 * earlier rule: FAILED at once. */
#ifndef NOWAIT
#define BOUND_PASSED(k) (!window[k])
#else
#define BOUND_PASSED(k) true
#endif

/* The wait ends when B has passed, or when the lock has ended first
 * (expired; taken over, or completed by the provider's event: no longer
 * owned). */
#define WAIT_ENDS(k, me) (!window[k] || rec[k].exp || !OWNED(k, me))
#define WAITED_ENOUGH(k, me) (!window[k] && OWNED(k, me))
#define CANNOT_WAIT(k, me) (rec[k].exp || !OWNED(k, me))

/* The settlement (Settle) after a resumed attempt's refusal: the lookup by key,
 * one step with the refused call's answer (it reads only the provider's
 * ledger). The model says what it finds: LOOKUP_FINDS(o, me, seen) are its
 * options for a decision, a lost answer and a request being processed,
 * LOOKUP_NONE(o) is nothing under the key and LOOKUP_SAYS_NONE(o, me) its
 * narration; W_LOOKUP_FOUND and the other W_ are its witnesses. Nothing
 * under the key after a refusal for now is unknown; after a refusal for
 * good it is FAILED once B has passed since this attempt's claim, and
 * before that the attempt waits; at a provider without a bound it is
 * unknown. A provider that cannot be asked is not looked up: the refusal
 * is unknown at once. */
#if PKIND != 3
#define LOOK_UP(k, o, me) \
	if \
	LOOKUP_FINDS(o, me, W_LOOKUP_FOUND) \
	:: LOOKUP_NONE(o) -> \
		LOOKUP_SAYS_NONE(o, me); \
		NOTHING_FOUND(k, o, me) \
	fi
#elif !defined(NOTIFYGUESS)
#define LOOK_UP(k, o, me) \
	if \
	:: reply == R_REFUSED -> SEEN(W_NOT_ASKED) \
	:: else -> skip \
	fi; \
	reply = R_UNKNOWN; \
	printf("T%d: the provider cannot be asked: unknown\n", me)
#else
#define LOOK_UP(k, o, me) \
	if \
	:: reply == R_REFUSED -> reply = R_FAIL; \
		printf("T%d: the provider cannot be asked: the refusal taken as proof\n", me) \
	:: else -> reply = R_UNKNOWN; \
		printf("T%d: the provider cannot be asked: unknown\n", me) \
	fi
#endif
#if CORE_WAITS
#define NOTHING_FOUND(k, o, me) \
	if \
	:: reply == R_REFUSED && BOUND_PASSED(k) -> reply = R_FAIL; SEEN(W_LOOKUP_FAILED) \
	:: reply == R_REFUSED && !BOUND_PASSED(k) -> WAIT_AND_LOOK_UP(k, o, me) \
	:: else -> reply = R_UNKNOWN \
	fi
#else
#define NOTHING_FOUND(k, o, me) \
	if \
	:: reply == R_REFUSED -> SEEN(W_NOTHING_KEPT); \
		printf("T%d: nothing found proves nothing without a bound: unknown\n", me) \
	:: else -> skip \
	fi; \
	reply = R_UNKNOWN
#endif
/* The wait: the step blocks (others run) until B has passed since the
 * attempt's claim, and the key is looked up again: a request that landed
 * meanwhile is found, and nothing is FAILED. If the lock ends first, the
 * outcome is unknown. A crash ends the wait as it ends any step. */
#define WAIT_AND_LOOK_UP(k, o, me) \
	waiting[me] = 1; \
	WAIT_ENDS(k, me); \
	waiting[me] = 0; \
	if \
	:: WAITED_ENOUGH(k, me) -> \
		printf("T%d: B has passed since its claim: looks the key up again\n", me); \
		if \
		LOOKUP_FINDS(o, me, W_WAITED_FOUND) \
		:: LOOKUP_NONE(o) -> \
			LOOKUP_SAYS_NONE(o, me); reply = R_FAIL; \
			SEEN(W_LOOKUP_FAILED); SEEN(W_WAITED_FAILED) \
		fi \
	:: CANNOT_WAIT(k, me) -> \
		reply = R_UNKNOWN; SEEN(W_CANNOT_WAIT); \
		printf("T%d: its lock ends before B has passed: unknown\n", me) \
	fi

/* A key's window matters only while an attempt has a call of that key to
 * make (it may be late) or to settle (it may wait): phase 1 notes it
 * (CALL_PENDING, with the command's go); the call ends it (CALL_MADE),
 * except for the owner of a resumed reservation, whose answer's step ends
 * it (CALL_SETTLED), as does the attempt's end. When no attempt of the key
 * has one, its window is closed, so that states that differ only in it are
 * one. */
#if NTOK == 5
#define ANY_TOK(P, k) (P(1, k) || P(2, k) || P(3, k) || P(4, k))
#else
#define ANY_TOK(P, k) (P(1, k) || P(2, k) || P(3, k))
#endif
#define CALLS(t, k) (calls[t] == (k) + 1)
#define WAITS(t, k) (calls[t] == (k) + 1 && waiting[t])
#define IN_WINDOW(k) (window[k] && ANY_TOK(WAITS, k))
#define WINDOW_UNUSED(k) \
	if \
	:: !ANY_TOK(CALLS, k) -> window[k] = 0 \
	:: else -> skip \
	fi
#define CALL_PENDING(k, me, go) \
	if \
	:: go -> calls[me] = (k) + 1 \
	:: else -> skip \
	fi; \
	WINDOW_UNUSED(k)
#define CALL_SETTLED(k, me) calls[me] = 0; waiting[me] = 0; WINDOW_UNUSED(k)
#define CALL_MADE(k, me, resumed) \
	d_step { \
		if \
		:: !(resumed) || holder[k] != (me) -> CALL_SETTLED(k, me) \
		:: else -> skip \
		fi \
	}
/* the same at the end of a step that is not a d_step already */
#define CALL_SETTLED_STEP(k, me) d_step { CALL_SETTLED(k, me) }

/* The completer's pick: an IN_PROGRESS record whose lock expired. */
#define ABANDONED(k) (rec[k].st == INPROG && rec[k].exp)
