/* Answers made on another thread, handed to a worker's loop (shared_state.h). */
#include "shared_state.h"

#include "core/xalloc.h"

struct sl_shared_inbox {
    h2o_multithread_receiver_t receiver;
};

static void
on_letters(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        sl_shared_letter_t *letter = H2O_STRUCT_FROM_MEMBER(sl_shared_letter_t, super.link, messages->next);
        h2o_linklist_unlink(&letter->super.link);
        letter->open(letter);
    }
}

sl_shared_inbox_t *
sl_shared_inbox_new(h2o_multithread_queue_t *queue)
{
    sl_shared_inbox_t *inbox = sl_xcalloc(1, sizeof(*inbox));
    h2o_multithread_register_receiver(queue, &inbox->receiver, on_letters);
    return inbox;
}

void
sl_shared_inbox_post(sl_shared_inbox_t *inbox, sl_shared_letter_t *letter)
{
    h2o_multithread_send_message(&inbox->receiver, &letter->super);
}
