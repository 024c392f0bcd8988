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

bool kill[NTOK];   /* this attempt dies with its replica at its next step */
byte crashes, slow, lost, dnc, refusals, dbfail, purges, faults;

/* ghosts: not in the system, only for the properties and the environment */
byte holder[NKEY];       /* the attempt that made the key's latest claim */
bool owner_alive[NKEY];  /* ... and it is still running */
bool alive[NTOK];        /* the attempt with this token is running */
byte clients_done;       /* clients that stopped */
byte nfinal;             /* clients that got a final answer */
bool completer_done;

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

/* The claim's write: the INSERT, or the DO UPDATE of a takeover.
 * CLAIM_CHECK(k) is the model's check before it. */
#define CLAIM_WRITE(k, me, h, p) \
	CLAIM_CHECK(k); \
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
	alive[me] = 0; \
	if \
	:: holder[k] == (me) -> owner_alive[k] = 0 \
	:: else -> skip \
	fi

/* The completer's pick: an IN_PROGRESS record whose lock expired. */
#define ABANDONED(k) (rec[k].st == INPROG && rec[k].exp)
