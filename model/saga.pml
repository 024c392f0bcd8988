/*
 * payment-service: a saga's payment step and its compensation, as a
 * Promela model for spin. docs/model.md ("Saga steps") explains the model,
 * its bounds, the properties P16 to P19, the mutants, and maps each step to
 * the Go function that implements it (internal/app/saga_steps.go,
 * internal/repository/sagas.go; decision 0029).
 *
 * What is modelled: one saga step, a ChargeOrder.v1 (SagaSteps.Charge), and
 * its CompensateCharge.v1 (SagaSteps.Compensate), each delivered NCHG and
 * NCMP times, in any order and concurrently (a re-send, a redelivery after
 * a crash or a rebalance). The saga_step rows of both (SagaStore.Begin,
 * one INSERT ... ON CONFLICT on (saga_id, step_name)); the keys of both
 * (SagaStepScope, SagaCompensationScope) with their claim, the provider
 * call and the record; the tombstone a compensation leaves before its step
 * (SagaSteps.tombstone, one transaction); the wait of a compensation whose
 * step is in flight (saga_step.waiting) and the completer's run that takes
 * it up (CompleteWaitingCompensations); the compensation's refund, fixed
 * once (SagaStore.FixRefund), under its own key. A provider that decides a
 * charge once per provider key (approved or declined) and refunds once per
 * refund's provider key; an attempt that dies after any step (a crash) and
 * a provider answer that is lost (the outcome unknown: the claim's lock is
 * given back early and the key stays IN_PROGRESS); the completer, which
 * takes over an abandoned claim and asks the provider again under the same
 * provider key.
 *
 * What the core does inside a key (takeover after a slow lock, the fence,
 * the lookup, the bound on a request's age, release, TTL purge) is checked
 * by model/payment.pml and model/refund.pml; here a key is claimed, decided
 * and recorded once, and taken over only when its owner has gone.
 *
 * A database transaction (or one statement) is one atomic step: it commits
 * as a whole or leaves no trace.
 *
 * Build flags (spin -D...):
 *   NCHG, NCMP     deliveries of the step and of its compensation (2, 2)
 *   MAXCRASH=n     attempts that die after a step (default 1)
 *   MAXLOST=n      provider answers lost (default 1)
 *   WITNESS=n      stop at reachable event n (proves a check is not vacuous)
 *   SKIP_Pn        switch property Pn off
 * Mutants (each must produce a counterexample):
 *   NOTOMBSTONE    a compensation that finds no step answers compensated
 *                  (zero) and leaves nothing: the late step charges; P16
 *   NOWAIT         a compensation whose step's key holds no outcome yet
 *                  (in flight, unknown, or not claimed) answers compensated
 *                  (zero) at once instead of waiting: the step charges
 *                  after it; P16
 */

#ifndef NCHG
#define NCHG 2
#endif
#ifndef NCMP
#define NCMP 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXLOST
#define MAXLOST 1
#endif

/* the completer's attempts */
#define TOK_COMPLETER (NCHG + NCMP + 1)

/* the charge's amount; the refund is what it charged (leftToRefund: no
 * other refund of the payment here) */
#define AMT 1

/* idempotency_record.status; NONE = no row */
#define NONE       0
#define INPROG     1
#define COMPLETED  2
/* saga_step.kind of the step's name; NONE = no row */
#define S_CHARGE   1
#define S_TOMB     2
/* the reply a key's stored response carries */
#define Y_NONE        0
#define Y_CHARGED     1
#define Y_DECLINED    2
#define Y_CANCELLED   3
#define Y_COMPENSATED 4
/* the provider's ledger under the charge's provider key */
#define P_NONE     0
#define P_APPROVED 1
#define P_DECLINED 2
/* what a delivery ended in */
#define E_NONE     0
#define E_REPLIED  1
#define E_PENDING  2
#define E_RETRY    3
#define E_DIED     4
/* the commands, for their replies */
#define C_STEP 0
#define C_COMP 1

typedef Key {
	byte st;     /* NONE, INPROG, COMPLETED */
	byte typ;    /* the stored reply's type */
	byte amt;    /* its amount */
	byte id;     /* its eventId; 0 = none */
	byte owner   /* the running attempt that holds the claim (its lock is
	              * live); 0: none, so the lock may expire */
};

Key  skey;         /* the step's key, SagaStepScope */
Key  ckey;         /* the compensation's key, SagaCompensationScope */
byte steprow;      /* saga_step row of the step's name: NONE, S_CHARGE, S_TOMB */
byte fixed;        /* the compensation's refund_amount + 1; 0 = NULL */
bool cwaiting;     /* the compensation's saga_step.waiting */
byte pcharge;      /* the provider's ledger under the charge's key */
bool prefund;      /* ... under the compensation refund's key */
byte crashes, lost;

/* ghosts: not in the system, only for the properties */
byte charged;      /* what the provider charged */
byte refunded;     /* what the provider gave back */
byte nextid;       /* eventIds made so far */
byte pub[2];       /* the first reply published per command (its eventId) */
bool cancelled;    /* a cancelled reply was stored for the step */

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

/* P16: after compensated, net money is zero: once the compensation's key
 * holds its compensated reply, what the provider charged for the step less
 * what it gave back is zero, and stays zero. */
#define P16_OK (!(ckey.st == COMPLETED && ckey.typ == Y_COMPENSATED) || charged == refunded)
/* P17: a cancelled step never charges: once the step's name is a
 * tombstone (its key answered cancelled), the provider charges nothing for
 * it, ever. */
#define P17_OK (!(steprow == S_TOMB || cancelled) || charged == 0)
/* P19: never gives back more than the step charged. */
#define P19_OK (refunded <= charged)

/* P18: each command's reply is the same on every re-send: every reply
 * published for a command carries the eventId of the first. */
#ifndef SKIP_P18
#define PUBLISH(c, i) \
	if \
	:: pub[c] == 0 -> pub[c] = i \
	:: else -> PROP("VIOLATED P18 each command's reply is the same on every re-send\n", pub[c] == (i)) \
	fi
#else
#define PUBLISH(c, i) pub[c] = (pub[c] == 0 -> i : pub[c])
#endif

/* The invariants, checked in every state. */
active proctype Invariants()
{
end:
	if
#ifndef SKIP_P16
	:: !P16_OK -> printf("VIOLATED P16 after compensated, net money is zero\n"); assert(P16_OK)
#endif
#ifndef SKIP_P17
	:: !P17_OK -> printf("VIOLATED P17 a cancelled step never charges\n"); assert(P17_OK)
#endif
#ifndef SKIP_P19
	:: !P19_OK -> printf("VIOLATED P19 never gives back more than was charged\n"); assert(P19_OK)
#endif
	fi
}

/* Witnesses */
#define W_TOMBSTONE        1   /* a compensation before its step leaves a tombstone */
#define W_LATE_CANCELLED   2   /* the late step finds it: its cancelled reply is published */
#define W_TOMB_RACE        3   /* the tombstone's transaction finds the step came meanwhile */
#define W_WAITS            4   /* a compensation waits for its step in flight */
#define W_WAITED_REFUNDS   5   /* the completer carries a waiting compensation out: a refund */
#define W_REFUNDED         6   /* a compensation's refund is recorded */
#define W_DECLINED_ZERO    7   /* a compensation after a declined step: compensated, zero */
#define W_STEP_REPLAY      8   /* a re-sent step gets its stored reply again */
#define W_COMP_REPLAY      9   /* a re-sent compensation gets its stored reply again */
#define W_SETTLES_LOST     10  /* the completer records a charge whose answer was lost */
#define W_CLAIMED_NO_WAIT  11  /* a waiting compensation whose refund is claimed waits no more */
#define W_STEP_HELD        12  /* a re-sent step finds its key held: pending */

/* ---------------------------------------------------------- statements */

/* A new reply: a fresh eventId. */
#define NEWID(k, t, a) nextid++; k.typ = t; k.amt = a; k.id = nextid

/* An attempt dies after a step (its replica crashes): what it committed
 * stays, and its claim's lock expires (owner = 0). */
#define MAY_DIE(k) \
	if \
	:: crashes < MAXCRASH -> crashes++; k.owner = (k.owner == me -> 0 : k.owner); res = E_DIED; printf("T%d: dies\n", me) \
	:: true -> skip \
	fi
/* The provider's answer is lost: the outcome is unknown; the attempt
 * gives its claim's lock back early, the key stays IN_PROGRESS. */
#define MAY_LOSE(k) \
	if \
	:: lost < MAXLOST -> lost++; k.owner = 0; res = E_PENDING; \
		printf("T%d: the provider's answer is lost: unknown\n", me) \
	:: true -> skip \
	fi

/* answer (SagaSteps.answer): the compensation's key answered compensated
 * with zero, if it holds no record; otherwise the transaction stores
 * nothing and the command is tried again (ErrSagaRetry). */
#define ANSWER_ZERO \
	atomic { \
		if \
		:: ckey.st == NONE -> \
			ckey.st = COMPLETED; NEWID(ckey, Y_COMPENSATED, 0); PUBLISH(C_COMP, ckey.id); res = E_REPLIED; \
			printf("T%d: compensated with zero\n", me) \
		:: else -> res = E_RETRY \
		fi \
	}

/* The locals of the attempts (declared once per process: the inlines
 * below use them). */
#define ATTEMPT_LOCALS \
	byte res = E_NONE, d, kind, cst, srow, sst, styp; \
	bool took, selfwaiting, selffixed, lostseen
#define RESET_LOCALS \
	d_step { res = E_NONE; d = 0; kind = 0; cst = 0; srow = 0; sst = 0; styp = 0; \
		took = 0; selfwaiting = 0; selffixed = 0; lostseen = 0 }

/* The charge's attempt on the step's key (ChargePayment.Handle under
 * SagaStepScope): claim, call, record. A takeover (the completer, or a
 * re-sent step) of a claim whose owner has gone asks the provider again
 * under the same provider key, which answers what it decided. */
inline charge_attempt()
{
	atomic {
		if
		:: skey.st == NONE || (skey.st == INPROG && skey.owner == 0) ->
			skey.st = INPROG; skey.owner = me; took = 1;
			printf("T%d: claims the step's key\n", me)
		:: skey.st == COMPLETED ->
			PUBLISH(C_STEP, skey.id); res = E_REPLIED; SEEN(W_STEP_REPLAY);
			printf("T%d: the step's stored reply again\n", me)
		:: skey.st == INPROG && skey.owner != 0 ->
			res = E_PENDING; SEEN(W_STEP_HELD)
		fi
	}
	if
	:: took ->
		MAY_DIE(skey);
		if
		:: res == E_NONE ->
			/* the provider, idempotent by the charge's provider key */
			atomic {
				if
				:: pcharge == P_NONE ->
					if
					:: pcharge = P_APPROVED; charged = charged + AMT; printf("provider charges\n")
					:: pcharge = P_DECLINED; printf("provider declines\n")
					fi
				:: else -> skip
				fi;
				d = pcharge
			}
			MAY_LOSE(skey);
			if
			:: res == E_NONE ->
				atomic {
					skey.st = COMPLETED; skey.owner = 0;
					NEWID(skey, (d == P_APPROVED -> Y_CHARGED : Y_DECLINED), (d == P_APPROVED -> AMT : 0));
					PUBLISH(C_STEP, skey.id); res = E_REPLIED;
					if
					:: lostseen -> SEEN(W_SETTLES_LOST)
					:: else -> skip
					fi;
					printf("T%d: records the step (charged: %d)\n", me, d == P_APPROVED)
				}
			:: else -> skip
			fi
		:: else -> skip
		fi
	:: else -> skip
	fi
}

/* The compensation's refund (SagaSteps.refund): RefundPayment under the
 * compensation's key, for the amount fixed in its row. Once its key is
 * claimed (by it or before), a waiting compensation waits no more. */
inline refund_attempt()
{
	atomic {
		if
		:: ckey.st == NONE || (ckey.st == INPROG && ckey.owner == 0) ->
			ckey.st = INPROG; ckey.owner = me; took = 1;
			printf("T%d: claims the compensation's key for its refund\n", me)
		:: ckey.st == COMPLETED ->
			PUBLISH(C_COMP, ckey.id); res = E_REPLIED; SEEN(W_COMP_REPLAY)
		:: ckey.st == INPROG && ckey.owner != 0 -> res = E_PENDING
		fi
	}
	if
	:: took ->
		MAY_DIE(ckey);
		if
		:: res == E_NONE ->
			atomic {
				if
				:: !prefund -> prefund = 1; refunded = refunded + (fixed - 1); printf("provider refunds\n")
				:: else -> skip
				fi
			}
			MAY_LOSE(ckey);
			if
			:: res == E_NONE ->
				atomic {
					ckey.st = COMPLETED; ckey.owner = 0; NEWID(ckey, Y_COMPENSATED, fixed - 1);
					PUBLISH(C_COMP, ckey.id); res = E_REPLIED; SEEN(W_REFUNDED);
					if
					:: me == TOK_COMPLETER && selfwaiting -> SEEN(W_WAITED_REFUNDS)
					:: else -> skip
					fi;
					printf("T%d: compensated: refunded\n", me)
				}
			:: else -> skip
			fi
		:: else -> skip
		fi
	:: else -> skip
	fi;
	/* claimed: a decision, an unknown outcome, or a claim held */
	if
	:: res != E_DIED && selfwaiting -> cwaiting = 0
	:: else -> skip
	fi
}

/* SagaSteps.Compensate, from its Begin on. */
inline compensate()
{
	/* Begin: its own row (the same command each time: it stands), with
	 * its wait and its refund as they are now */
	d_step { selfwaiting = cwaiting; selffixed = (fixed != 0) }
	/* its key: a compensation that ran before */
	cst = ckey.st;
	if
	:: cst == COMPLETED ->
		atomic { PUBLISH(C_COMP, ckey.id); res = E_REPLIED; SEEN(W_COMP_REPLAY) }
	:: (cst == INPROG || cst == NONE) && selffixed -> refund_attempt()
	:: cst == INPROG && !selffixed ->
		/* its refund claimed after its Begin read the row: "a record but
		 * no refund fixed", an error; the command is tried again */
		res = E_RETRY
	:: cst == NONE && !selffixed ->
		srow = steprow;     /* SagaStore.Get of the step */
		printf("T%d: the compensation reads the step's row: %d (0 none, 1 charge, 2 tombstone)\n", me, srow);
		if
		:: srow == NONE ->
#ifndef NOTOMBSTONE
			/* the tombstone, its cancelled answer for the step's key and
			 * the compensation's own answer, in one transaction */
			atomic {
				if
				:: steprow == NONE && ckey.st == NONE ->
					steprow = S_TOMB;
					skey.st = COMPLETED; NEWID(skey, Y_CANCELLED, 0); cancelled = 1;
					ckey.st = COMPLETED; NEWID(ckey, Y_COMPENSATED, 0); PUBLISH(C_COMP, ckey.id);
					res = E_REPLIED; SEEN(W_TOMBSTONE);
					printf("T%d: before its step: a tombstone\n", me)
				:: steprow != NONE ->
					res = E_RETRY; SEEN(W_TOMB_RACE);
					printf("T%d: the step came meanwhile: tried again\n", me)
				:: else -> res = E_RETRY
				fi
			}
#else
			ANSWER_ZERO
#endif
		:: srow == S_TOMB -> ANSWER_ZERO
		:: srow == S_CHARGE ->
			atomic { sst = skey.st; styp = skey.typ }
			if
			:: sst != COMPLETED ->
#ifndef NOWAIT
				cwaiting = 1; res = E_PENDING; SEEN(W_WAITS);
				printf("T%d: its step is in flight: waits\n", me)
#else
				ANSWER_ZERO
#endif
			:: sst == COMPLETED && styp != Y_CHARGED -> ANSWER_ZERO; SEEN(W_DECLINED_ZERO)
			:: sst == COMPLETED && styp == Y_CHARGED ->
				/* FixRefund: the amount fixed once */
				atomic {
					if
					:: fixed == 0 -> fixed = AMT + 1
					:: else -> skip
					fi
				}
				MAY_DIE(ckey);
				if
				:: res == E_NONE -> refund_attempt()
				:: else -> skip
				fi
			fi
		fi
	fi
}

/* SagaSteps.Charge: Begin, then the charge under the step's key, or, after
 * a tombstone, the cancelled reply the tombstone stored (republishOr). */
proctype Step(byte me)
{
	ATTEMPT_LOCALS;
	atomic {
		if
		:: steprow == NONE -> steprow = S_CHARGE
		:: else -> skip
		fi;
		kind = steprow;
		printf("T%d: the step begins (its name is a %d: 1 charge, 2 tombstone)\n", me, kind)
	}
	if
	:: kind == S_TOMB ->
		atomic {
			if
			:: skey.st == COMPLETED ->
				PUBLISH(C_STEP, skey.id); res = E_REPLIED; SEEN(W_LATE_CANCELLED);
				printf("T%d: the step came after its compensation: cancelled\n", me)
			:: skey.st == NONE ->
				skey.st = COMPLETED; NEWID(skey, Y_CANCELLED, 0); cancelled = 1;
				PUBLISH(C_STEP, skey.id); res = E_REPLIED
			:: else -> res = E_RETRY
			fi
		}
	:: kind == S_CHARGE -> charge_attempt()
	fi
}

proctype Compensation(byte me)
{
	ATTEMPT_LOCALS;
	compensate()
}

/* The completer: abandoned claims taken over (Resume), and the waiting
 * compensations (CompleteWaitingCompensations). */
active proctype Completer()
{
	byte me = TOK_COMPLETER;
	ATTEMPT_LOCALS;
end_loop:
	do
	:: skey.st == INPROG && skey.owner == 0 ->
		lostseen = (lost > 0);
		charge_attempt();
		RESET_LOCALS
	:: ckey.st == INPROG && ckey.owner == 0 ->
		refund_attempt();
		RESET_LOCALS
	:: cwaiting ->
		if
		:: ckey.st != NONE -> cwaiting = 0; SEEN(W_CLAIMED_NO_WAIT)
		:: else -> compensate(); RESET_LOCALS
		fi
	od
}

init {
	byte i;
	atomic {
		i = 1;
		do
		:: i <= NCHG -> run Step(i); i++
		:: i > NCHG && i <= NCHG + NCMP -> run Compensation(i); i++
		:: else -> break
		od
	}
}
