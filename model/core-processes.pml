/*
 * payment-service: the processes both models of the idempotency protocol
 * share, once: the client and the environment (crashes, lock expiry, the
 * TTL purge). Included by model/payment.pml and model/refund.pml after
 * their own processes, with model/core.pml's definitions and these of the
 * model's own:
 *   COMMAND(k, o, a, me)  the command's inline (charge, refund) for key k,
 *                         object o (external payment or refund), amount a
 *   COMMAND_LOCALS, RESET_COMMAND   its locals, and forgetting them
 *   CMD_K, CMD_OBJ, CMD_A           client i's key, object, amount
 *   NOT_500(cond)         the model's property that no answer is a 500
 *   PURGEABLE(k)          what the TTL purge may delete
 *   PURGE_SEEN(k)         (optional) the model's witness of a purge
 */

proctype Client(byte me)
{
	byte k = CMD_K(me), o = CMD_OBJ(me), a = CMD_A(me);
	byte ans = A_NONE, att = 0;
	COMMAND_LOCALS;

	do
	:: FINAL(ans) -> nfinal++; break
#ifndef LIVENESS
	:: !FINAL(ans) && att == MAXATT -> break
	:: !FINAL(ans) && att < MAXATT ->
		att++;
#else
	:: !FINAL(ans) ->
#endif
		ATTEMPT_STARTS(me);
		{
			COMMAND(k, o, a, me);
			d_step { ATTEMPT_ENDS(k, me) }     /* the answer leaves the replica */
		} unless {
			atomic {
				kill[me] -> kill[me] = 0; ATTEMPT_ENDS(k, me); ans = A_CRASH;
				printf("T%d: dies with its replica\n", me)
			}
		};
		d_step {
			assert(ans != A_NONE);
			NOT_500(ans != A_500);
			RESET_COMMAND;
			if
			:: !FINAL(ans) -> ans = A_NONE       /* retryable: the client retries */
			:: else -> skip
			fi
		}
	od;
	clients_done++
}

#if NCLI == 3
#define ALIVE_ANY (alive[1] || alive[2] || alive[3] || alive[4])
#define KILLED_ANY (kill[1] || kill[2] || kill[3] || kill[4])
#else
#define ALIVE_ANY (alive[1] || alive[2] || alive[3])
#define KILLED_ANY (kill[1] || kill[2] || kill[3])
#endif
#ifndef NOLEASE
#define EXPIRABLE(k) (rec[k].st == INPROG && !rec[k].exp && (!owner_alive[k] || MAY(slow, MAXSLOW)))
#else
#define EXPIRABLE(k) false
#endif

/* Time and failures: replica crashes, lock expiry, the TTL purge, the bound
 * B passing. */
active proctype Environment()
{
	byte k, t;
end:
	do
	:: atomic {
		/* A replica crashes (and restarts): every attempt placed on it
		 * dies. With two replicas and any placement that is any non-empty
		 * set of the running attempts, chosen here instead of at each start. */
		MAY(crashes, MAXCRASH) && ALIVE_ANY ->
		FAULT(crashes);
		t = 1;
		do
		:: t < NTOK ->
			if
			:: alive[t] -> kill[t] = 1
			:: true -> skip
			fi;
			t++
		:: t == NTOK -> break
		od;
		if
		:: KILLED_ANY -> skip
		:: else ->
			/* the empty choice stands for the first running attempt alone */
			t = 1;
			do
			:: !alive[t] -> t++
			:: alive[t] -> kill[t] = 1; break
			od
		fi;
		printf("a replica crashes\n");
		t = 0
	   }
	:: atomic {
		/* A lock expires: at any time once its owner has gone (crashed or
		 * answered), at most MAXSLOW times while its owner still works. */
		ANY_KEY(EXPIRABLE) ->
		PICK_KEY(EXPIRABLE, k);
		if
		:: owner_alive[k] -> FAULT(slow);
			printf("the lock of K%d expires while its owner T%d still works\n", k, rec[k].tok)
		:: else -> printf("the lock of K%d expires\n", k)
		fi;
		rec[k].exp = 1; k = 0
	   }
	:: atomic {
		/* The retention target, past the TTL: PURGEABLE. (Rows locked by a
		 * running transaction are skipped; none is mid-transaction here.) */
		purges < MAXPURGE && ANY_KEY(PURGEABLE) ->
		purges++;
		PICK_KEY(PURGEABLE, k);
#ifdef PURGE_SEEN
		PURGE_SEEN(k);
#endif
		printf("the TTL purge deletes K%d\n", k);
		DELETE_RECORD(k); k = 0
	   }
	:: atomic {
		/* B passes since the key's latest takeover, while its owner waits
		 * for it (model/core.pml, "the bound on a request's age") */
		ANY_KEY(IN_WINDOW) ->
		PICK_KEY(IN_WINDOW, k);
		printf("the bound B passes since K%d's latest takeover\n", k);
		window[k] = 0; k = 0
	   }
	od
}
