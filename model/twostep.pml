/*
 * payment-service: the captures and voids of an authorized payment, as a
 * Promela model for spin. docs/model.md ("Two-step payments") explains the
 * model, its bounds, the properties P20 to P22, the mutant, and maps each
 * step to the Go function and SQL statement that implement it
 * (internal/app/payment_transition.go, capture_payment.go, void_payment.go,
 * internal/repository/transitions.go, db/migrations/00022).
 *
 * What is modelled: one payment, AUTHORIZED for AUTH at the provider; NCLI
 * clients, each sending a capture or a void under its own key, up to
 * MAXATT attempts each, all at once. A transition's attempt is the core's:
 * phase 0 (the key's record read: a replay, or a live claim in progress),
 * the payment read (transitionOf: only an AUTHORIZED payment), phase 1 in
 * one statement (the key claimed with a PENDING payment_transition, which
 * ux_payment_transition_one_winner admits only if no other transition of
 * the payment is PENDING or SUCCEEDED; or the takeover of an abandoned
 * claim, which keeps its transition), and when nothing was reserved the
 * statement that reads what blocks it (Blocking); phase 2, the provider
 * under the transition's provider key; phase 3 in one statement, fenced by
 * the claim (the key completed, the transition final, on an approval the
 * payment SUCCEEDED with its captured amount or VOIDED, only if it is still
 * AUTHORIZED); Release of a claim the provider did not act on. The
 * completer takes over abandoned claims (PaymentTransition.Resume). The
 * provider's hold may lapse while nothing was captured or voided, after
 * which it refuses every transition for good; the expiry job
 * (ExpireLapsedAuthorizations, TransitionStore.Expire) then makes the
 * payment EXPIRED, only if no transition of it is PENDING.
 *
 * The provider: idempotent by each transition's provider key (a capture's
 * names its reference, a void's is one per payment); it may decline; it
 * may refuse a call for now (nothing done: the claim is released); its
 * answer may be lost, and the lookup by key that settles it may fail too
 * (unknown: the key stays IN_PROGRESS with its PENDING transition, the
 * lock given back early). By default it carries out whatever it is asked
 * while the hold has not lapsed, even a second capture or a void after a
 * capture: that only one transition of a payment is ever asked for must
 * hold without the provider's help. GUARDED is a provider that refuses for
 * good any transition after another one was approved (as the sandbox
 * does); the checks pass with it too.
 *
 * What the core does inside a key (the fence against a slow owner, the
 * bound on a request's age, the TTL purge) is checked by model/payment.pml
 * and model/refund.pml; here a claim is taken over only when its owner has
 * gone. A transaction (or one statement) is one atomic step.
 *
 * Build flags (spin -D...):
 *   SCEN=1..4      which commands race (see "Scenarios")
 *   MAXATT=n       attempts per client (default 2)
 *   MAXCRASH, MAXLOST, MAXDNC, MAXDECLINE, MAXLAPSE   the fault budget
 *                  (each default 1)
 *   GUARDED        the provider refuses a transition after another's approval
 *   WITNESS=n      stop at reachable event n
 *   SKIP_Pn        switch property Pn off
 * Mutant (must produce a counterexample):
 *   NOINDEX        no ux_payment_transition_one_winner: the claim inserts its
 *                  PENDING transition whenever the payment is AUTHORIZED
 *                  (the check-then-act of "no other transition in flight",
 *                  read before and acted on after); breaks P20, then P21
 *   STATEFIRST     a refusal decided from the payment's state answers at
 *                  once, without reading the key again (the state checked
 *                  before the key): a duplicate that read the key before
 *                  the first request's claim, and the payment after its
 *                  record, is told "not authorized" while its own key's
 *                  capture was made; breaks P23 (SCEN=4)
 */

#ifndef SCEN
#define SCEN 1
#endif
#ifndef MAXATT
#define MAXATT 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXLOST
#define MAXLOST 1
#endif
#ifndef MAXDNC
#define MAXDNC 1
#endif
#ifndef MAXDECLINE
#define MAXDECLINE 1
#endif
#ifndef MAXLAPSE
#define MAXLAPSE 1
#endif

/* the authorized amount */
#define AUTH 2
#define CAPTURE 1
#define VOID 2

/* ------------------------------------------------------------ scenarios */

/* Client i (0..NCLI-1) sends, under key K_i, CMD_KIND(i) for CMD_AMT(i)
 * (a capture's), whose provider key is CMD_PK(i): a capture's names its
 * reference (R0, R1: 0, 1), a void's is the payment's one (2). */
#if SCEN == 1
/* a capture of the whole amount racing a void */
#define NCLI 2
#define CMD_KIND(i) ((i) == 0 -> CAPTURE : VOID)
#define CMD_AMT(i)  ((i) == 0 -> AUTH : 0)
#define CMD_PK(i)   ((i) == 0 -> 0 : 2)
#elif SCEN == 2
/* two captures, of 2 and 1, that together exceed the authorization */
#define NCLI 2
#define CMD_KIND(i) CAPTURE
#define CMD_AMT(i)  ((i) == 0 -> 2 : 1)
#define CMD_PK(i)   (i)
#elif SCEN == 3
/* a partial capture racing two voids under two keys (one provider key) */
#define NCLI 3
#define CMD_KIND(i) ((i) == 0 -> CAPTURE : VOID)
#define CMD_AMT(i)  ((i) == 0 -> 1 : 0)
#define CMD_PK(i)   ((i) == 0 -> 0 : 2)
#elif SCEN == 4
/* the same capture sent twice at once: both clients send key K_0's
 * command (K_1 is never used) */
#define NCLI 2
#define SAME_KEY
#define CMD_KIND(i) CAPTURE
#define CMD_AMT(i)  AUTH
#define CMD_PK(i)   0
#else
#error "SCEN must be 1, 2, 3 or 4"
#endif
/* the key client c sends its command under */
#ifdef SAME_KEY
#define KEY_OF(c) 0
#else
#define KEY_OF(c) (c)
#endif
#define NPK 3
#define TOK_COMPLETER (NCLI + 1)   /* clients' tokens are 1..NCLI */

/* ------------------------------------------------------------ constants */

/* idempotency_record.status */
#define NONE       0
#define INPROG     1
#define COMPLETED  2
/* payment.status */
#define AUTHORIZED 1
#define SUCCEEDED  2   /* captured */
#define VOIDED     3
#define EXPIRED    4
/* payment_transition.status; NONE = no row */
#define PENDING    1
#define T_SUCCEEDED 2
#define T_DECLINED 3
#define T_FAILED   4
#define LIVE(i)    (tr[i] == PENDING || tr[i] == T_SUCCEEDED)
/* the provider's ledger per provider key */
#define P_NONE     0
#define P_APPROVED 1
#define P_DECLINED 2
/* what the call or its settlement says */
#define R_NONE     0
#define R_APPROVED 1
#define R_DECLINED 2
#define R_DNC      3   /* not done, for now: release */
#define R_UNKNOWN  4
#define R_FAILED   5   /* refused for good, nothing under the key: FAILED */
/* answers to the client: final ones ... */
#define A_NONE     0
#define A_200      1   /* captured, voided (or replayed) */
#define A_402      2   /* declined */
#define A_422      3   /* failed: refused for good */
#define A_409S     4   /* the payment is not authorized (not stored) */
/* ... and retryable ones */
#define A_409T     5   /* another transition is in progress (not stored) */
#define A_409P     6   /* this key is in progress */
#define A_503      7   /* provider unavailable or outcome unknown */
#define A_CRASH    8
#define FINAL(a)   ((a) >= A_200 && (a) <= A_409S)

/* ---------------------------------------------------------------- state */

byte pst = AUTHORIZED;   /* payment.status */
byte pcap;               /* payment.captured_amount; 0 = NULL */
byte tr[NCLI];           /* the transition of key K_i's claim */
byte kst[NCLI];          /* idempotency_record.status of K_i */
byte kowner[NCLI];       /* the running attempt holding K_i's claim; 0: none */
byte kresp[NCLI];        /* its stored answer */
byte led[NPK];           /* the provider's ledger */
bool lapsed;             /* the provider's hold lapsed */
byte crashes, lost, dnc, declines, lapses;

/* ghosts */
byte pwon;               /* transitions the provider approved */
bool kapproved[NCLI];    /* K_i's transition recorded as approved */
byte pcaptured;          /* what the provider captured */
bool pvoided;            /* the provider voided the hold */
byte clients_done;

/* ----------------------------------------------------------- properties */

#define PROP(msg, cond) \
	if \
	:: !(cond) -> printf(msg); assert(cond) \
	:: else -> skip \
	fi

#ifdef WITNESS
#define SEEN(n) \
	if \
	:: WITNESS == (n) -> printf("WITNESS %d reached\n", n); assert(WITNESS != (n)) \
	:: else -> skip \
	fi
#else
#define SEEN(n) skip
#endif

/* P20: exactly one of the captures and voids wins at the provider: it
 * approves at most one of them, and once all is quiet the payment says
 * which (SUCCEEDED with what the provider captured, or VOIDED), or that
 * none won (AUTHORIZED, EXPIRED). */
#define QUIET (clients_done == NCLI && !ANY_INPROG)
#define P20_OK (pwon <= 1 && (!QUIET || \
	((pwon == 1) == (pst == SUCCEEDED || pst == VOIDED) && \
	 (pst != SUCCEEDED || (pcaptured == pcap && !pvoided)) && \
	 (pst != VOIDED || (pvoided && pcaptured == 0)))))
/* P21: never captured above the authorization, at the provider or in the
 * payment. */
#define P21_OK (pcaptured <= AUTH && pcap <= AUTH)
/* P22: an unknown outcome never frees the order or the hold: while a
 * transition is PENDING the payment stays AUTHORIZED (it holds the order:
 * holds_order), EXPIRED only when the provider won nothing; and a claim is
 * released (its PENDING transition deleted) only when the provider holds
 * nothing under its key (checked at the release). */
#define P22_OK ((!ANY_PENDING || pst == AUTHORIZED) && (pst != EXPIRED || pwon == 0))
#ifndef SKIP_P22
#define P22(cond) PROP("VIOLATED P22 an unknown outcome never frees the order or the hold\n", cond)
#else
#define P22(cond) skip
#endif
/* P23: the same key and command get the stored answer or "in progress":
 * a client that ends on "not authorized" (A_409S, not stored) sent a
 * transition the provider never approved under its key. Checked when the
 * client ends, against every approval so far: one approval moves the
 * payment for good, so a refusal beside its own key's approval is one the
 * request that made it never got. */
#ifndef SKIP_P23
#define P23(k) PROP("VIOLATED P23 the same key and command get the stored answer or in progress\n", !(ans == A_409S && kapproved[k]))
#else
#define P23(k) skip
#endif

#if NCLI == 3
#define ANY_INPROG (kst[0] == INPROG || kst[1] == INPROG || kst[2] == INPROG)
#define ANY_PENDING (tr[0] == PENDING || tr[1] == PENDING || tr[2] == PENDING)
#define OTHER_LIVE(i) (((i) != 0 && LIVE(0)) || ((i) != 1 && LIVE(1)) || ((i) != 2 && LIVE(2)))
#define WINNER_PENDING(i) (((i) != 0 && tr[0] == PENDING) || ((i) != 1 && tr[1] == PENDING) || ((i) != 2 && tr[2] == PENDING))
#else
#define ANY_INPROG (kst[0] == INPROG || kst[1] == INPROG)
#define ANY_PENDING (tr[0] == PENDING || tr[1] == PENDING)
#define OTHER_LIVE(i) (((i) != 0 && LIVE(0)) || ((i) != 1 && LIVE(1)))
#define WINNER_PENDING(i) (((i) != 0 && tr[0] == PENDING) || ((i) != 1 && tr[1] == PENDING))
#endif

active proctype Invariants()
{
end:
	if
#ifndef SKIP_P20
	:: !P20_OK -> printf("VIOLATED P20 exactly one of capture and void wins at the provider\n"); assert(P20_OK)
#endif
#ifndef SKIP_P21
	:: !P21_OK -> printf("VIOLATED P21 never captured above the authorization\n"); assert(P21_OK)
#endif
#ifndef SKIP_P22
	:: !P22_OK -> printf("VIOLATED P22 an unknown outcome never frees the order or the hold\n"); assert(P22_OK)
#endif
	fi
}

/* Witnesses */
#define W_CAPTURED       1   /* a capture recorded: the payment SUCCEEDED */
#define W_VOIDED         2   /* a void recorded: the payment VOIDED */
#define W_LOSER_WAITS    3   /* a transition meets the PENDING winner: 409, retryable */
#define W_LOSER_FINAL    4   /* a transition after the winner's success: 409, final */
#define W_LOOKUP_SETTLES 5   /* a lost answer settled by the lookup */
#define W_UNKNOWN_KEPT   6   /* the lookup fails: the key stays IN_PROGRESS */
#define W_COMPLETER      7   /* the completer records an abandoned transition */
#define W_RELEASED       8   /* a call the provider did not act on: released */
#define W_AFTER_DECLINE  9   /* a transition reserved after another's decline */
#define W_EXPIRED        10  /* the expiry job records the lapse */
#define W_LAPSE_FAILED   11  /* a transition after the lapse: FAILED */
#define W_REPLAY         12  /* a retry of a completed key gets its answer */
#define W_EXPIRE_BLOCKED 13  /* the hold lapsed while a transition is PENDING: not expired yet */
#define W_REFUSAL_READS_KEY 14 /* a refusal from the payment's state meets its own key's record: its answer */

/* ----------------------------------------------------------- an attempt */

#define MAY_DIE \
	if \
	:: crashes < MAXCRASH -> crashes++; kowner[i] = (kowner[i] == me -> 0 : kowner[i]); ans = A_CRASH; \
		printf("T%d: dies with its replica\n", me) \
	:: true -> skip \
	fi

/* The provider acts on a new transition: any while the hold has not
 * lapsed, or with GUARDED only while no other one was approved. */
#ifdef GUARDED
#define OPEN (pwon == 0)
#else
#define OPEN true
#endif

/* One attempt of the command of key K_i, by attempt me (a client's, or
 * the completer's takeover). */
inline transition(i, me)
{
	/* phase 0: the key's record */
	atomic {
		if
		:: kst[i] == COMPLETED -> ans = kresp[i]; SEEN(W_REPLAY)
		:: kst[i] == INPROG && kowner[i] != 0 -> ans = A_409P
		:: else -> skip
		fi
	}
	/* the payment read (transitionOf): only an AUTHORIZED payment; the
	 * refusal is answered below, once the key is read again */
	if
	:: ans == A_NONE && pst != AUTHORIZED -> ans = A_409S
	:: else -> skip
	fi;
	/* phase 1: claim, in one statement */
	if
	:: ans == A_NONE ->
		atomic {
			if
			:: kst[i] == COMPLETED -> ans = kresp[i]
			:: kst[i] == INPROG && kowner[i] != 0 -> ans = A_409P
			:: kst[i] == INPROG && kowner[i] == 0 ->
				kowner[i] = me; resumed = 1;    /* a takeover keeps its transition */
				printf("T%d: takes K%d over with its PENDING transition\n", me, i)
			:: kst[i] == NONE ->
#ifndef NOINDEX
				if
				:: pst == AUTHORIZED && !OTHER_LIVE(i) ->
#else
				if
				:: pst == AUTHORIZED ->
#endif
					if
					:: declined_before -> SEEN(W_AFTER_DECLINE)
					:: else -> skip
					fi;
					tr[i] = PENDING; kst[i] = INPROG; kowner[i] = me;
					printf("T%d: claims K%d with a PENDING transition (kind %d: 1 capture, 2 void)\n", me, i, CMD_KIND(i))
				:: else -> blocked = 1
				fi
			fi
		}
	:: else -> skip
	fi;
	/* nothing reserved: what blocks it, in a statement of its own */
	if
	:: blocked ->
		atomic {
			if
			:: WINNER_PENDING(i) -> ans = A_409T; SEEN(W_LOSER_WAITS)
			:: !WINNER_PENDING(i) && (pst != AUTHORIZED || OTHER_LIVE(i)) -> ans = A_409S; SEEN(W_LOSER_FINAL)
			:: else -> ans = A_409T     /* ErrReserveContended: gone since */
			fi
		}
	:: else -> skip
	fi;
	/* A refusal decided from the payment's state reads the key again
	 * (IdempotentCommand.refused): a record there answers, as phase 0
	 * would have (the payment may have moved by this very key). */
#ifndef STATEFIRST
	if
	:: ans == A_409S ->
		atomic {
			if
			:: kst[i] == COMPLETED -> ans = kresp[i]; SEEN(W_REFUSAL_READS_KEY)
			:: kst[i] == INPROG -> ans = A_409P; SEEN(W_REFUSAL_READS_KEY)
			:: else -> skip
			fi
		}
	:: else -> skip
	fi;
#endif
	if
	:: ans == A_NONE -> MAY_DIE
	:: else -> skip
	fi;
	/* phase 2: the provider, under the transition's provider key */
	if
	:: ans == A_NONE ->
		atomic {
			if
			:: lapsed ->
				reply = R_FAILED; printf("provider refuses: the hold lapsed\n")
#ifdef GUARDED
			:: !lapsed && led[CMD_PK(i)] == P_NONE && pwon > 0 ->
				reply = R_FAILED; printf("provider refuses: the hold moved on\n")
#endif
			:: !lapsed && led[CMD_PK(i)] == P_NONE && OPEN && dnc < MAXDNC ->
				dnc++; reply = R_DNC; printf("provider refuses for now\n")
			:: !lapsed && led[CMD_PK(i)] == P_NONE && OPEN ->
				if
				:: declines < MAXDECLINE -> declines++; led[CMD_PK(i)] = P_DECLINED
				:: true ->
					led[CMD_PK(i)] = P_APPROVED; pwon++;
					if
					:: CMD_KIND(i) == CAPTURE -> pcaptured = pcaptured + CMD_AMT(i)
					:: else -> pvoided = 1
					fi
				fi
			:: else -> skip
			fi;
			if
			:: reply == R_NONE && led[CMD_PK(i)] == P_APPROVED -> reply = R_APPROVED
			:: reply == R_NONE && led[CMD_PK(i)] == P_DECLINED -> reply = R_DECLINED
			:: else -> skip
			fi;
			printf("T%d: the provider answers %d\n", me, reply)
		}
		/* the answer lost; the lookup by key settles it, or fails too */
		if
		:: (reply == R_APPROVED || reply == R_DECLINED) && lost < MAXLOST ->
			lost++;
			if
			:: SEEN(W_LOOKUP_SETTLES); printf("T%d: the answer is lost: the lookup finds it\n", me)
			:: reply = R_UNKNOWN; printf("T%d: the answer is lost, the lookup fails: unknown\n", me)
			fi
		:: else -> skip
		fi;
		/* A resumed reservation refused for now is looked up (an earlier
		 * attempt may have sent it): nothing under the key is unknown,
		 * and only a reservation this attempt made is released. */
		if
		:: reply == R_DNC && resumed -> reply = R_UNKNOWN
		:: else -> skip
		fi;
		/* phase 3 */
		atomic {
			if
			:: reply == R_UNKNOWN ->
				/* the early lock release: the key stays IN_PROGRESS */
				kowner[i] = 0; ans = A_503; SEEN(W_UNKNOWN_KEPT)
			:: reply == R_DNC ->
				/* Release, fenced: the claim and its PENDING transition go */
				P22(led[CMD_PK(i)] == P_NONE);
				kst[i] = NONE; kowner[i] = 0; tr[i] = NONE; ans = A_503; SEEN(W_RELEASED)
			:: reply == R_APPROVED || reply == R_DECLINED || reply == R_FAILED ->
				assert(kst[i] == INPROG && kowner[i] == me && tr[i] == PENDING);
				kst[i] = COMPLETED; kowner[i] = 0;
				if
				:: reply == R_APPROVED ->
					tr[i] = T_SUCCEEDED; ans = A_200; kapproved[i] = 1;
					if
					:: pst == AUTHORIZED && CMD_KIND(i) == CAPTURE ->
						pst = SUCCEEDED; pcap = CMD_AMT(i); SEEN(W_CAPTURED)
					:: pst == AUTHORIZED && CMD_KIND(i) == VOID ->
						pst = VOIDED; SEEN(W_VOIDED)
					:: else -> skip
					fi
				:: reply == R_DECLINED -> tr[i] = T_DECLINED; ans = A_402
				:: reply == R_FAILED -> tr[i] = T_FAILED; ans = A_422; SEEN(W_LAPSE_FAILED)
				fi;
				kresp[i] = ans;
				if
				:: me == TOK_COMPLETER -> SEEN(W_COMPLETER)
				:: else -> skip
				fi;
				printf("T%d: records K%d: answer %d\n", me, i, ans)
			fi
		}
	:: else -> skip
	fi
}

#define RESET d_step { ans = A_NONE; reply = R_NONE; resumed = 0; blocked = 0 }

proctype Client(byte i)
{
	byte me = i + 1, ans = A_NONE, reply = R_NONE, att = 0;
	bool resumed, blocked, declined_before;
	do
	:: FINAL(ans) -> break
	:: !FINAL(ans) && att == MAXATT -> break
	:: !FINAL(ans) && att < MAXATT ->
		att++;
		d_step { declined_before = (tr[0] == T_DECLINED || tr[NCLI - 1] == T_DECLINED); ans = A_NONE; reply = R_NONE;
			resumed = 0; blocked = 0 }
		transition(KEY_OF(i), me)
	od;
	P23(KEY_OF(i));
	clients_done++
}

/* The completer: an abandoned claim taken over and carried on
 * (PaymentTransition.Resume runs the command again). */
active proctype Completer()
{
	byte me = TOK_COMPLETER, ans = A_NONE, reply = R_NONE, i;
	bool resumed, blocked, declined_before;
end:
	do
	:: atomic {
		(kst[0] == INPROG && kowner[0] == 0) -> i = 0 }
		transition(i, me); RESET; i = 0
	:: atomic {
		(kst[1] == INPROG && kowner[1] == 0) -> i = 1 }
		transition(i, me); RESET; i = 0
#if NCLI == 3
	:: atomic {
		(kst[2] == INPROG && kowner[2] == 0) -> i = 2 }
		transition(i, me); RESET; i = 0
#endif
	od
}

/* The provider's hold lapses (nothing captured or voided), and the expiry
 * job asks the provider and records it: EXPIRED only if no transition of
 * the payment is PENDING (TransitionStore.Expire). */
active proctype Expiry()
{
end:
	do
	:: atomic { lapses < MAXLAPSE && !lapsed && pwon == 0 -> lapses++; lapsed = 1; printf("provider: the hold lapses\n") }
	:: atomic {
		lapsed && pst == AUTHORIZED && !ANY_PENDING -> pst = EXPIRED; SEEN(W_EXPIRED);
		printf("the expiry job records the payment EXPIRED\n") }
	:: atomic { lapsed && pst == AUTHORIZED && ANY_PENDING -> SEEN(W_EXPIRE_BLOCKED) }
	od
}

init {
	byte c;
	atomic {
		c = 0;
		do
		:: c < NCLI -> run Client(c); c++
		:: else -> break
		od
	}
}
