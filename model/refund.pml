/*
 * payment-service: the idempotency protocol of POST /payments/{id}/refunds,
 * as a Promela model for spin. docs/model.md ("Refunds") explains the model,
 * its bounds, the properties P9 to P13, the mutants, and maps each step to
 * the Go function and SQL statement that implement it.
 *
 * A second model beside model/payment.pml, not a part of it: a refund runs
 * on the same core (claim, provider call outside any transaction, fenced
 * record; takeover, release, early lock release, lookup, completer), but
 * what it reserves and what can go wrong with money differ (a refund total
 * against one charge instead of one payment per order), and the charge's
 * checks stay as cheap and as readable as they were. What the two share,
 * the record, its statements, the fault budget, the client and the
 * environment, is written once in model/core.pml and
 * model/core-processes.pml.
 *
 * What is modelled: one payment, SUCCEEDED at the provider for CHARGE; the
 * refund command (claim, takeover, resume, the reservation against the
 * payment's refund total with the second layer on the external refund id,
 * the provider call, record; for a call that brought no decision: release,
 * FAILED, the lookup by key, early lock release), the completer of abandoned
 * refunds, the TTL purge, a provider that is idempotent by its own key
 * (derived from the external refund id), whose answers can be lost, that
 * may refuse requests for good before it looks at their key, that refuses a
 * refund beyond what is left of the charge (and records nothing under its
 * key), that answers a lookup by key truthfully, and that refuses a request
 * older than the bound B (a resumed refusal then waits for B before it
 * records FAILED), or, with PKIND, a provider without the bound or without
 * the lookup; replicas that crash at any step, and locks that expire
 * while their owner is slow or after it has gone.
 *
 * A database transaction (or one statement) is one atomic step (d_step): it
 * commits as a whole or, on a crash or a rollback, leaves no trace. A crash
 * between two steps keeps what was committed and loses the process's local
 * state.
 *
 * Build flags (spin -D...):
 *   SCEN=1..3      which requests run concurrently (see "Scenarios")
 *   MAXFAULTS=n    how many faults one run may contain (see "Fault budget")
 *   MAXATT=n       attempts per client without LIVENESS
 *   LIVENESS       clients retry until they get a final answer; the LTL
 *                  formula 'live' is checked with weak fairness (pan -a -f)
 *   WITNESS=n      stop at reachable event n (proves a check is not vacuous)
 *   SKIP_Pn        switch property Pn off (to show what a mutant breaks next)
 *   PKIND=1..3     what the provider lets the outcome model learn: 1 a
 *                  lookup and a request bound (the sandbox, the default),
 *                  2 a lookup and no bound, 3 no lookup; see "the
 *                  provider's kind", model/core.pml
 * Mutants (each must produce a counterexample):
 *   CHECKTHENACT   the reservation is check-then-act: the refund total is
 *                  read in one statement (the guide's SELECT sum), the refund
 *                  inserted in a later one, with no refund_reserved column
 *                  and no CHECK; breaks P9
 *   NEWKEY         the provider key is made per attempt (a resumed attempt
 *                  sends a new one) instead of from the external refund id;
 *                  breaks P10
 *   NOFENCE        fenced writes do not compare lock_token, only the key and
 *                  status = 'IN_PROGRESS'; breaks P12, then P11
 *   NOCOMMAND      the completer before records knew their command: it
 *                  reads every record as a charge's, so a refund's record
 *                  (payment_id NULL) is "nothing reserved" and is
 *                  released; breaks P11
 *   DELUNKNOWN     an unknown outcome is taken as "not refunded": the key is
 *                  released and the PENDING refund deleted, its amount given
 *                  back; breaks P12 (and P11)
 *   NOLEASE        a claim has no lease: its lock never expires by itself
 *                  (only the early release gives it back); breaks P13
 *   NOWAIT         (with REFUSEONCE) the earlier rule for a resumed refund
 *                  refused for good: FAILED as soon as the lookup finds
 *                  nothing, without waiting until B has passed since the
 *                  attempt's claim; breaks P12, then P11
 * A weaker provider (the checks must pass with it too):
 *   REFUSEONCE     a refusal for good answers the refused request only; a
 *                  later request for X may be accepted (by default the
 *                  provider refuses every later request for X). FAILED
 *                  after a resumed refusal then rests on the bound B alone
 *                  (see "the bound on a request's age", model/core.pml)
 */

/* ------------------------------------------------------------ scenarios */

#ifndef SCEN
#define SCEN 1
#endif

/* The payment: SUCCEEDED at the provider, CHARGE charged. */
#define CHARGE 2

/* Client i (1..NCLI) sends the refund command (key CMD_K, external refund
 * CMD_X, amount CMD_A) for the payment. The command hash is (X, amount). */
#if SCEN == 1
/* two refunds under two keys that fit alone and together exceed the charge */
#define NCLI 2
#define CMD_K(i) ((i) - 1)
#define CMD_X(i) ((i) - 1)
#define CMD_A(i) (i)
#elif SCEN == 2
/* one refund under two keys: the second layer on the external refund id */
#define NCLI 2
#define CMD_K(i) ((i) - 1)
#define CMD_X(i) 0
#define CMD_A(i) 1
#elif SCEN == 3
/* one key: the same refund request twice */
#define NCLI 2
#define CMD_K(i) 0
#define CMD_X(i) 0
#define CMD_A(i) 1
#else
#error "SCEN must be 1, 2 or 3"
#endif

#define TOK_COMPLETER (NCLI + 1)   /* lock token of the completer's attempts */
#define NTOK (NCLI + 2)            /* tokens 1..NCLI+1; 0 = NULL */
#define NKEY 2                     /* idempotency keys K0, K1 of one API client */
#define NX 2                       /* external refunds X0, X1 (one provider) */
#define HASH(x, a) ((x) * 3 + (a))

/* The provider key of refund x: refund:provider:X, one per external refund
 * (domain.Refund.ProviderIdempotencyKey). The mutant NEWKEY makes a new one
 * for a resumed attempt. */
#ifndef NEWKEY
#define NPK NX
#define PK(x) (x)
#else
#define NPK (2 * NX)
#define PK(x) ((x) + (resumed -> NX : 0))
#endif
#define XOF(pk) ((pk) % NX)

/* The core both models share: the fault budget, the record and its
 * statements, the attempts (model/core.pml). */
#define RECOVERY rid               /* the record's recovery point: refund_id */
#include "core.pml"

/* ------------------------------------------------------------ constants */

#define COUNTS(x)  (ref[x].st == PENDING || ref[x].st == SUCCEEDED)
/* the provider's ledger, per provider key */
#define P_NONE     0
#define P_RUNNING  1   /* accepted, being processed */
#define P_REFUNDED 2
#define P_DECLINED 3
#define P_REFUSED  4   /* refused beyond the charge: nothing recorded under the
                        * key (a lookup finds none); the waiting caller is
                        * told "refused" */
#define PNONE(pk)  (prov[pk] == P_NONE || prov[pk] == P_REFUSED)
/* answers to the client: final ones ... */
#define A_NONE     0
#define A_201      1   /* refunded */
#define A_200      2   /* the external refund is already recorded as this refund */
#define A_422D     3   /* refund-declined */
#define A_422F     4   /* refund-failed: refused for good, nothing refunded */
#define A_409X     5   /* external-refund-conflict */
#define A_409K     6   /* idempotency-key-reused (final for this command, not stored) */
#define A_409E     7   /* refund-exceeds-payment (not stored) */
/* ... retryable ones ... */
#define A_409P     8   /* request-in-progress */
#define A_503N     9   /* provider unavailable, nothing was refunded */
#define A_503U     10  /* outcome unknown */
#define A_CRASH    11  /* the connection dropped: the replica crashed */
/* ... and one that must never be given */
#define A_500      12
#define FINAL(x)   ((x) >= A_201 && (x) <= A_409E)

/* ---------------------------------------------------------------- state */

typedef Ref {
	byte st;       /* NONE, PENDING, SUCCEEDED, DECLINED, FAILED */
	byte amt
};

Ref  ref[NX];      /* refund, one row per UNIQUE (provider, external_refund_id) */
byte reserved;     /* payment.refund_reserved: the PENDING and SUCCEEDED total */
byte ev[NX];       /* outbox events written per refund */
byte prov[NPK];    /* provider ledger, per provider key */
byte pamt[NPK];    /* the amount the provider refunded (or was asked for) */
bool refusing[NX]; /* the provider refuses every request for X, for good */

/* ghosts: not in the system, only for the properties and the environment */
byte refunded;           /* the provider's refunded total of the charge */
byte nrefunds[NX];       /* refunds the provider made per external refund */

/* ----------------------------------------------------------- properties */

#define LIVE_TOTAL ((COUNTS(0) -> ref[0].amt : 0) + (COUNTS(1) -> ref[1].amt : 0))

/* P9: no refund beyond the charge. The provider's refunded total never
 * exceeds CHARGE; the service's refunds that are not declined (PENDING and
 * SUCCEEDED) never add up to more than CHARGE, and refund_reserved is their
 * total. */
#ifndef SKIP_P9
#define P9(cond) PROP("VIOLATED P9 no refund beyond the charge\n", cond)
#else
#define P9(cond) skip
#endif
#define SERVICE_TOTAL_OK P9(LIVE_TOTAL <= CHARGE && reserved == LIVE_TOTAL)
/* P10: no refund made twice: the provider makes at most one refund per
 * external refund, whatever keys and attempts asked for it. */
#ifndef SKIP_P10
#define P10(cond) PROP("VIOLATED P10 no refund made twice\n", cond)
#else
#define P10(cond) skip
#endif
/* P11: no refund lost: once the system is quiet, every refund the provider
 * made is a SUCCEEDED refund with its amount and one event; every decline a
 * DECLINED refund with one event; every SUCCEEDED refund was made; every
 * FAILED refund has one event and nothing at the provider; nothing is left
 * PENDING or IN_PROGRESS. */
#ifndef SKIP_P11
#define P11(cond) PROP("VIOLATED P11 no refund lost once quiet\n", cond)
#else
#define P11(cond) skip
#endif
/* P12: every answer is true when it is given: 201/200 = the provider
 * refunded this external refund with this amount; 422 refund-declined = it
 * declined it; 422 refund-failed and 503 "nothing was refunded" = it holds
 * no refund for it and is not processing a request for it; 409
 * refund-exceeds-payment = the refunds that count leave less than the
 * amount. And no answer is a 500. */
#ifndef SKIP_P12
#define P12(cond) PROP("VIOLATED P12 every answer is true\n", cond)
#else
#define P12(cond) skip
#endif
/* P13 is the LTL formula at the end: every client that retries gets a final
 * answer. No attempt hangs (spin's invalid end states). */

/* What the provider holds for external refund x, under any of its keys. */
#ifndef NEWKEY
#define X_IS(x, s) (prov[x] == (s))
#define X_REFUNDED_AS(x, a) (prov[x] == P_REFUNDED && pamt[x] == (a))
#else
#define X_IS(x, s) (prov[x] == (s) || prov[(x) + NX] == (s))
#define X_REFUNDED_AS(x, a) ((prov[x] == P_REFUNDED && pamt[x] == (a)) || \
	(prov[(x) + NX] == P_REFUNDED && pamt[(x) + NX] == (a)))
#endif
#define REFUNDED_AS(x, a) P12(X_REFUNDED_AS(x, a))
#define NOTHING_REFUNDED(x) P12(!X_IS(x, P_REFUNDED) && !X_IS(x, P_RUNNING))
#define RESP_TRUE(r, x, a) \
	if \
	:: (r) == A_201 || (r) == A_200 -> REFUNDED_AS(x, a) \
	:: (r) == A_422D -> P12(X_IS(x, P_DECLINED)) \
	:: (r) == A_422F -> NOTHING_REFUNDED(x) \
	:: else -> skip \
	fi

/* --------------------------------------------------- database statements */

/* refund_target's fits, on the payment row locked first: the refund total
 * after this refund stays within the amount. The mutant decided it in an
 * earlier statement. */
#ifndef CHECKTHENACT
#define FITS(a) (reserved + (a) <= CHARGE)
#else
#define FITS(a) s_fits
#endif

/* The refund's check before a claim's write (model/core.pml): none. */
#define CLAIM_CHECK(k) skip

/* The lookup by key (LookupRefund) after a resumed refund's refusal: what
 * the provider holds under the refund's key, told truthfully; the answer
 * can be lost. The lookup's step, and what nothing under the key settles,
 * are the core's (LOOK_UP, model/core.pml). */
#define LOOKUP_FINDS(pk, me, seen) \
	:: MAY(lost, MAXLOST) -> \
		FAULT(lost); reply = R_UNKNOWN; \
		printf("T%d <- provider X%d: the lookup's answer is lost (unknown)\n", me, XOF(pk)) \
	:: prov[pk] == P_REFUNDED -> \
		reply = R_APPROVED; SEEN(seen); \
		printf("T%d <- provider X%d: looked up: refunded\n", me, XOF(pk)) \
	:: prov[pk] == P_DECLINED -> \
		reply = R_DECLINED; SEEN(seen); \
		printf("T%d <- provider X%d: looked up: declined\n", me, XOF(pk)) \
	:: prov[pk] == P_RUNNING -> \
		reply = R_UNKNOWN; \
		printf("T%d <- provider X%d: looked up: being processed (unknown)\n", me, XOF(pk))
#define LOOKUP_NONE(pk) PNONE(pk)
#define LOOKUP_SAYS_NONE(pk, me) printf("T%d <- provider X%d: looked up: no refund\n", me, XOF(pk))
/* the witnesses of the lookup: it finds a decision; nothing, FAILED; after
 * the wait it finds a decision (the late request's); nothing, FAILED; the
 * lock ends before B has passed */
#define W_LOOKUP_FOUND  12
#define W_LOOKUP_FAILED 20
#define W_WAITED_FOUND  21
#define W_WAITED_FAILED 22
#define W_CANNOT_WAIT   23
/* ... and at the other kinds of provider: nothing found after a refusal
 * for good kept unknown (no bound); a resumed refusal for good kept unknown
 * without a lookup (cannot be asked) */
#define W_NOTHING_KEPT  24
#define W_NOT_ASKED     25

/* ------------------------------------------------------- RefundPayment */

/*
 * RefundPayment.Handle for the command (k, x, a), made by the attempt whose
 * lock token is me. Leaves the answer in ans. Uses the caller's locals
 * declared by REFUND_LOCALS.
 */
inline refund(k, x, a, me)
{
#ifdef CHECKTHENACT
	/* check: the refund total as a plain SELECT sum, no lock */
	d_step {
		s_fits = (LIVE_TOTAL + a <= CHARGE);
		printf("T%d K%d: check sees refunds of %d, X%d fits: %d\n", me, k, LIVE_TOTAL, x, s_fits)
	};
#endif
	/* Phase 1: one statement (claimAndReserveRefundSQL), or its
	 * transaction for the rare answers. */
	d_step {
		/* the claim */
		if
		:: rec[k].st == NONE ->
			claimed = 1; trid = 0
		:: rec[k].st == INPROG && rec[k].exp && rec[k].hash == HASH(x, a) ->
			claimed = 1; trid = rec[k].rid
		:: else ->
			claimed = 0; rst = rec[k].st; rhash = rec[k].hash; rresp = rec[k].resp
		fi;
		if
		:: !claimed ->
			/* not claimed: answer from the existing record */
			if
			:: rhash != HASH(x, a) ->
				ans = A_409K;
				printf("T%d K%d: not claimed, another command: 409 key-reused\n", me, k)
			:: rhash == HASH(x, a) && rst == COMPLETED ->
				ans = rresp; RESP_TRUE(rresp, x, a); SEEN(6);
				printf("T%d K%d: not claimed, COMPLETED: replays answer %d\n", me, k, rresp)
			:: else ->
				ans = A_409P;
				printf("T%d K%d: not claimed, IN_PROGRESS: 409 in-progress\n", me, k)
			fi
		:: claimed && trid != 0 ->
			/* a takeover with a recovery point */
			assert(trid == x + 1);       /* the hash names the refund */
			if
			:: ref[x].st == NONE ->
				/* FOREIGN KEY refund_id rejects nothing here (the row is
				 * gone only with its record), but the statement finds no
				 * refund to go on with */
				ans = A_500;
				printf("T%d K%d: claim names deleted refund X%d: 500\n", me, k, x)
			:: ref[x].st == PENDING ->
				CLAIM_WRITE(k, me, HASH(x, a), trid);
				go = 1; resumed = 1; SEEN(1);
				printf("T%d K%d: takes the expired claim over, resumes PENDING X%d\n", me, k, x)
			:: ref[x].st == SUCCEEDED ->
				/* repair path: record what the refund says, no event */
				CLAIM_WRITE(k, me, HASH(x, a), trid);
				COMPLETE_WRITE(k, A_201); ans = A_201; REFUNDED_AS(x, a); SEEN(16);
				printf("T%d K%d: takeover finds X%d SUCCEEDED: completes 201\n", me, k, x)
			:: ref[x].st == DECLINED ->
				CLAIM_WRITE(k, me, HASH(x, a), trid);
				COMPLETE_WRITE(k, A_422D); ans = A_422D; P12(X_IS(x, P_DECLINED)); SEEN(16);
				printf("T%d K%d: takeover finds X%d DECLINED: completes 422\n", me, k, x)
			:: ref[x].st == FAILED ->
				CLAIM_WRITE(k, me, HASH(x, a), trid);
				COMPLETE_WRITE(k, A_422F); ans = A_422F; NOTHING_REFUNDED(x); SEEN(16);
				printf("T%d K%d: takeover finds X%d FAILED: completes 422 refund-failed\n", me, k, x)
			fi
		:: claimed && trid == 0 ->
			/* the reservation: the payment locked, then the refund row
			 * inserted ON CONFLICT DO NOTHING if it fits, its amount added
			 * to refund_reserved; or the row in the way */
			if
			:: ref[x].st == NONE && FITS(a) ->
				CLAIM_WRITE(k, me, HASH(x, a), x + 1);   /* with the recovery point */
				ref[x].st = PENDING; ref[x].amt = a; reserved = reserved + a;
				go = 1;
				if
				:: ref[1 - x].st == DECLINED || ref[1 - x].st == FAILED ->
					if
					:: ref[1 - x].amt + a > CHARGE -> SEEN(8)   /* room a decline gave back */
					:: else -> skip
					fi
				:: else -> skip
				fi;
				printf("T%d K%d: claims, reserves X%d PENDING amount %d (refunds now %d of %d)\n", me, k, x, a, reserved, CHARGE);
				SERVICE_TOTAL_OK
			:: ref[x].st == NONE && !FITS(a) ->
				ans = A_409E;                            /* roll back, not stored */
				P12(reserved + a > CHARGE); SEEN(7);
				printf("T%d K%d: X%d amount %d does not fit (refunds %d of %d): rolls back, 409 refund-exceeds-payment\n", me, k, x, a, reserved, CHARGE)
			:: ref[x].st != NONE && ref[x].amt != a ->
				/* second layer: X is another refund */
				CLAIM_WRITE(k, me, HASH(x, a), 0); COMPLETE_WRITE(k, A_409X); ans = A_409X;
				printf("T%d K%d: X%d is another refund: completes 409 external-refund-conflict\n", me, k, x)
			:: ref[x].st == PENDING && ref[x].amt == a ->
				ans = A_409P;                            /* roll back */
				SEEN(10);
				printf("T%d K%d: X%d PENDING under another key: rolls back, 409 in-progress\n", me, k, x)
			:: ref[x].st == SUCCEEDED && ref[x].amt == a ->
				CLAIM_WRITE(k, me, HASH(x, a), 0); COMPLETE_WRITE(k, A_200); ans = A_200;
				REFUNDED_AS(x, a); SEEN(9);
				printf("T%d K%d: X%d SUCCEEDED, same refund: completes 200\n", me, k, x)
			:: ref[x].st == DECLINED && ref[x].amt == a ->
				CLAIM_WRITE(k, me, HASH(x, a), 0); COMPLETE_WRITE(k, A_422D); ans = A_422D;
				P12(X_IS(x, P_DECLINED));
				printf("T%d K%d: X%d DECLINED, same refund: completes 422 refund-declined\n", me, k, x)
			:: ref[x].st == FAILED && ref[x].amt == a ->
				CLAIM_WRITE(k, me, HASH(x, a), 0); COMPLETE_WRITE(k, A_422F); ans = A_422F;
				NOTHING_REFUNDED(x);
				printf("T%d K%d: X%d FAILED, same refund: completes 422 refund-failed\n", me, k, x)
			fi
		fi;
		CALL_PENDING(k, me, go)
	};
	if
	:: go ->
		/* Phase 2: the provider, with the refund's provider key, outside
		 * any transaction. A refusal for good comes before the provider
		 * looks at the key: it answers this request only, whatever the key
		 * holds. */
		pk = PK(x);
		atomic {
			if
			:: TOO_OLD(k, me) ->
				/* this attempt's claim was taken over, and B has passed
				 * since (now, if not before): its request is older than B
				 * when it reaches the provider */
				window[k] = 0; reply = R_DNC; SEEN(19);
				printf("T%d -> provider X%d: too old (B passed since K%d's takeover): refused, not refunded\n", me, x, k)
			:: ON_TIME(k, me) && refusing[x] ->
				reply = R_REFUSED;
				printf("T%d -> provider X%d: refused for good\n", me, x)
#ifndef REFUSEONCE
			:: ON_TIME(k, me) && !refusing[x] && MAY(refusals, MAXREFUSE) ->
				FAULT(refusals); refusing[x] = 1; reply = R_REFUSED;
				printf("T%d -> provider X%d: refused for good (and every request for X%d from now on)\n", me, x, x)
#else
			:: ON_TIME(k, me) && MAY(refusals, MAXREFUSE) ->
				FAULT(refusals); reply = R_REFUSED;
				printf("T%d -> provider X%d: refused (this request only)\n", me, x)
#endif
			:: ON_TIME(k, me) && !refusing[x] && MAY(dnc, MAXDNC) ->
				FAULT(dnc); reply = R_DNC;   /* refused for now, or never sent */
				printf("T%d -> provider X%d: not refunded, for now\n", me, x)
			:: ON_TIME(k, me) && !refusing[x] && prov[pk] == P_RUNNING ->
				reply = R_UNKNOWN;           /* "a request with this key is in progress" */
				printf("T%d -> provider X%d key %d: refused, in progress (unknown)\n", me, x, pk)
			:: ON_TIME(k, me) && !refusing[x] && PNONE(pk) ->
				prov[pk] = P_RUNNING; pamt[pk] = a; reply = R_WAIT;
				printf("T%d -> provider X%d key %d amount %d: accepted\n", me, x, pk, a)
			:: ON_TIME(k, me) && !refusing[x] && prov[pk] == P_REFUNDED ->
				reply = R_APPROVED;          /* the stored answer: nothing new refunded */
				printf("T%d -> provider X%d key %d: stored answer, refunded\n", me, x, pk)
			:: ON_TIME(k, me) && !refusing[x] && prov[pk] == P_DECLINED ->
				reply = R_DECLINED;
				printf("T%d -> provider X%d key %d: stored answer, declined\n", me, x, pk)
			fi;
			CALL_MADE(k, me, resumed)
		};
		atomic {
			(reply != R_WAIT || prov[pk] != P_RUNNING);
			if
			:: reply == R_WAIT && prov[pk] == P_REFUNDED -> reply = R_APPROVED
			:: reply == R_WAIT && prov[pk] == P_DECLINED -> reply = R_DECLINED
			:: reply == R_WAIT && PNONE(pk) -> reply = R_REFUSED   /* beyond the charge */
			:: else -> skip
			fi;
			/* the answer can be lost on its way back */
			if
			:: (reply == R_APPROVED || reply == R_DECLINED) && MAY(lost, MAXLOST) ->
				FAULT(lost); reply = R_UNKNOWN;
				printf("T%d <- provider X%d: the answer is lost (unknown)\n", me, x)
			:: true -> skip
			fi;
			/* The settlement (Settle): a refusal of a refund this attempt reserved
			 * is the whole truth; a resumed refund's refusal is settled by
			 * the provider's record under the key, looked up now */
			if
			:: reply == R_REFUSED && !resumed ->
				reply = R_FAIL; SEEN(11)
			:: (reply == R_REFUSED || reply == R_DNC) && resumed ->
				LOOK_UP(k, pk, me)
			:: else -> skip
			fi;
			CALL_SETTLED_STEP(k, me)
		};
		if
		:: reply == R_APPROVED || reply == R_DECLINED || reply == R_FAIL ->
			/* Phase 3: one statement, or one that fails and changes nothing */
			if
			:: atomic {
				MAY(dbfail, MAXDBFAIL) -> FAULT(dbfail); ans = A_503U;
				printf("T%d K%d: phase 3 fails (database down): 503 outcome-unknown\n", me, k)
			   }
			:: d_step {
				if
				:: OWNED(k, me) && ref[x].st == PENDING ->
					if
					:: reply == R_APPROVED ->
						ref[x].st = SUCCEEDED; COMPLETE_WRITE(k, A_201); ans = A_201;
						REFUNDED_AS(x, ref[x].amt)
					:: reply == R_DECLINED ->
						ref[x].st = DECLINED; COMPLETE_WRITE(k, A_422D); ans = A_422D;
						reserved = reserved - ref[x].amt;        /* given back */
						P12(X_IS(x, P_DECLINED))
					:: reply == R_FAIL ->
						ref[x].st = FAILED; COMPLETE_WRITE(k, A_422F); ans = A_422F;
						reserved = reserved - ref[x].amt;        /* given back */
						NOTHING_REFUNDED(x)
					fi;
					ev[x]++;
					assert(ev[x] == 1);
					SERVICE_TOTAL_OK;
					if
					:: me == TOK_COMPLETER -> SEEN(2)
					:: else -> skip
					fi;
					printf("T%d K%d: phase 3 records X%d, completes %d, writes the event (refunds now %d of %d)\n", me, k, x, ans, reserved, CHARGE)
				:: OWNED(k, me) && ref[x].st != PENDING ->
					ans = A_500;             /* the refund is not PENDING: nothing written */
					printf("T%d K%d: phase 3 finds X%d not PENDING: 500\n", me, k, x)
				:: else ->
					/* lock lost: the key is looked up (IdempotentCommand.Handle
					 * on ErrLockLost, right after; docs/model.md). A COMPLETED
					 * record of this command is this request's answer too: a
					 * new owner recorded the decision. */
					SEEN(3);
					if
					:: rec[k].st == COMPLETED && rec[k].hash == HASH(x, a) ->
						ans = rec[k].resp; RESP_TRUE(ans, x, a); SEEN(18);
						printf("T%d K%d: phase 3 fenced out, the key is COMPLETED: answers %d\n", me, k, ans)
					:: else ->
						ans = A_409P;
						printf("T%d K%d: phase 3 fenced out (lock lost): 409 in-progress\n", me, k)
					fi
				fi
			   }
			fi
#ifndef DELUNKNOWN
		:: reply == R_DNC && !resumed ->
#else
		:: else ->
#endif
			/* release: nothing was refunded; the key and the reservation go */
			d_step {
				if
				:: OWNED(k, me) ->
					DELETE_RECORD(k);
					if
					:: ref[x].st == PENDING ->
						reserved = reserved - ref[x].amt; ref[x].st = NONE; ref[x].amt = 0
					:: else -> skip
					fi;
					ans = A_503N;
					NOTHING_REFUNDED(x); SEEN(4);
					SERVICE_TOTAL_OK;
					printf("T%d K%d: releases the key and deletes PENDING X%d: 503 nothing refunded\n", me, k, x)
				:: else ->
					ans = A_409P;            /* lock lost: the new owner holds it */
					printf("T%d K%d: release fenced out (lock lost): 409 in-progress\n", me, k)
				fi
			}
#ifndef DELUNKNOWN
		:: else ->
			/* unknown, or a resumed refund's refusal that the lookup did not
			 * settle: delete nothing (the amount stays reserved), give the
			 * lock back early */
			d_step {
				if
				:: OWNED(k, me) -> rec[k].exp = 1; SEEN(5)
				:: else -> skip
				fi;
				ans = A_503U;
				printf("T%d K%d: keeps the claim and X%d PENDING, releases the lock early: 503 outcome-unknown\n", me, k, x)
			}
#endif
		fi
	:: else -> skip
	fi
}

#ifdef CHECKTHENACT
#define REFUND_LOCALS \
	bit claimed, resumed, go, s_fits; byte trid, rhash, rst, rresp, reply, pk
#define RESET_CHECK s_fits = 0
#else
#define REFUND_LOCALS \
	bit claimed, resumed, go; byte trid, rhash, rst, rresp, reply, pk
#define RESET_CHECK skip
#endif
/* Forget an attempt's locals once it has ended, so that states that differ
 * only in dead values are one state. */
#define RESET_REFUND \
	claimed = 0; resumed = 0; go = 0; trid = 0; rhash = 0; rst = 0; rresp = 0; \
	reply = 0; pk = 0; RESET_CHECK

/* ------------------------------------------------------------ processes */

/* CompleteAbandonedCharges on the elected replica, for records named
 * 'refund': ListAbandoned picks an IN_PROGRESS record whose lock expired;
 * RefundPayment.Resume rebuilds the command from its refund (refund_id),
 * or, with none, the completer releases the record (ReleaseAbandoned,
 * which also requires refund_id IS NULL). With NOCOMMAND every record is
 * read as a charge's: its payment_id, NULL for a refund, means "nothing
 * reserved", and the release does not look at refund_id. It stops once the
 * clients have stopped and no record is left IN_PROGRESS. */
proctype Completer()
{
	byte k, x, a, crid, chash, ans;
	REFUND_LOCALS;

	do
	:: atomic {
		ABANDONED(0) || ABANDONED(1) ->
		if
		:: ABANDONED(0) -> k = 0
		:: ABANDONED(1) -> k = 1
		fi;
#ifndef NOCOMMAND
		crid = rec[k].rid;
#else
		crid = 0;                          /* payment_id, NULL for a refund */
#endif
		chash = rec[k].hash;
		printf("T%d (completer): K%d is abandoned\n", TOK_COMPLETER, k)
	   };
		ATTEMPT_STARTS(TOK_COMPLETER);
		{
			if
			:: crid == 0 ->
				/* ReleaseAbandoned: the conditions are re-checked in the DELETE */
				d_step {
					if
#ifndef NOCOMMAND
					:: rec[k].st == INPROG && rec[k].exp && rec[k].rid == 0 ->
#else
					:: rec[k].st == INPROG && rec[k].exp ->
#endif
						DELETE_RECORD(k); SEEN(15);
						printf("T%d (completer): deletes K%d (nothing reserved)\n", TOK_COMPLETER, k)
					:: else -> skip
					fi
				}
			:: crid != 0 ->
				/* Refunds.GetRefund: rebuild the command from the refund row */
				d_step {
					x = crid - 1;
					if
					:: ref[x].st != NONE -> a = ref[x].amt
					:: else -> a = 0              /* gone: Failed, left for the next run */
					fi
				};
				if
				:: a != 0 && HASH(x, a) == chash -> refund(k, x, a, TOK_COMPLETER)
				:: else -> skip
				fi
			fi;
			d_step { ATTEMPT_ENDS(k, TOK_COMPLETER) }
		} unless {
			atomic {
				kill[TOK_COMPLETER] -> kill[TOK_COMPLETER] = 0; ATTEMPT_ENDS(k, TOK_COMPLETER);
				printf("T%d (completer): dies with its replica\n", TOK_COMPLETER)
			}
		};
		d_step {
			P12(ans != A_500);
			RESET_REFUND; k = 0; x = 0; a = 0; crid = 0; chash = 0; ans = 0
		}
	:: atomic {
		clients_done == NCLI && rec[0].st != INPROG && rec[1].st != INPROG -> break
	   }
	od;
	completer_done = 1
}

/* The provider decides each refund it accepted, whether or not the caller
 * still waits for the answer: beyond what is left of the charge it refuses
 * and records nothing under the key (the sandbox's decideRefund); otherwise
 * it refunds or declines. */
#define RUNNING_ANY (prov[0] == P_RUNNING || prov[1] == P_RUNNING || \
	(NPK > 2 && (prov[NPK - 2] == P_RUNNING || prov[NPK - 1] == P_RUNNING)))
active proctype Provider()
{
	byte pk;
end:
	do
	:: atomic {
		RUNNING_ANY ->
		if
		:: prov[0] == P_RUNNING -> pk = 0
		:: prov[1] == P_RUNNING -> pk = 1
		:: NPK > 2 && prov[NPK - 2] == P_RUNNING -> pk = NPK - 2
		:: NPK > 2 && prov[NPK - 1] == P_RUNNING -> pk = NPK - 1
		fi;
		if
		:: refunded + pamt[pk] > CHARGE ->
			prov[pk] = P_REFUSED; SEEN(17);   /* only when the service reserved beyond the charge */
			printf("provider: refuses X%d amount %d: the charge has %d left\n", XOF(pk), pamt[pk], CHARGE - refunded)
		:: else ->
			if
			:: prov[pk] = P_REFUNDED; refunded = refunded + pamt[pk]; nrefunds[XOF(pk)]++;
				printf("provider: REFUNDS X%d amount %d (refunded %d of %d)\n", XOF(pk), pamt[pk], refunded, CHARGE);
				P9(refunded <= CHARGE);
				P10(nrefunds[XOF(pk)] <= 1)
			:: prov[pk] = P_DECLINED;
				printf("provider: declines X%d\n", XOF(pk))
			fi
		fi;
		pk = 0
	   }
	od
}

/* The processes the refund shares with the charge (model/core-processes.pml):
 * the client, running the refund, and the environment. The purge deletes
 * COMPLETED records only: an IN_PROGRESS one only when named 'charge'
 * (migration 00013), never a refund's. */
#define COMMAND(k, x, a, me) refund(k, x, a, me)
#define COMMAND_LOCALS REFUND_LOCALS
#define RESET_COMMAND RESET_REFUND
#define CMD_OBJ(i) CMD_X(i)
#define NOT_500(cond) P12(cond)
#define PURGEABLE(k) (rec[k].st == COMPLETED)
#include "core-processes.pml"

/* P11, once the system is quiet: the clients have stopped, the completer
 * has nothing left, the provider has decided every request it accepted. */
#define QUIET_KEY(pk) \
	P11(prov[pk] != P_REFUNDED || (ref[XOF(pk)].st == SUCCEEDED && ref[XOF(pk)].amt == pamt[pk] && ev[XOF(pk)] == 1)); \
	P11(prov[pk] != P_DECLINED || (ref[XOF(pk)].st == DECLINED && ev[XOF(pk)] == 1))
#define QUIET_REFUND(x) \
	P11(ref[x].st != SUCCEEDED || X_IS(x, P_REFUNDED)); \
	P11(ref[x].st != FAILED || (!X_IS(x, P_REFUNDED) && !X_IS(x, P_RUNNING) && ev[x] == 1)); \
	P11(ref[x].st != PENDING)

init {
	atomic {
		run Client(1); run Client(2);
		run Completer()
	};
	atomic {
		clients_done == NCLI && completer_done && !RUNNING_ANY ->
		QUIET_KEY(0); QUIET_KEY(1);
#ifdef NEWKEY
		QUIET_KEY(2); QUIET_KEY(3);
#endif
		QUIET_REFUND(0); QUIET_REFUND(1);
		P11(rec[0].st != INPROG && rec[1].st != INPROG);
		SERVICE_TOTAL_OK
	}
}

#ifdef LIVENESS
/* P13: a client that retries every retryable answer gets a final answer. */
ltl live { <> (nfinal == NCLI) }
#endif
