package rabbittest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// What a test does with a running node: declare, read queues, run
// rabbitmqctl.

// Conn is an AMQP connection for the test itself, closed when the test
// ends.
func (n *Node) Conn() *amqp.Connection {
	n.tb.Helper()
	c, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		n.tb.Fatal(err)
	}
	n.tb.Cleanup(func() { c.Close() })
	return c
}

// do runs f on a fresh channel of a fresh connection.
func (n *Node) do(f func(ch *amqp.Channel) error) error {
	c, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return f(ch)
}

// Declare declares a durable exchange of kind (direct, topic, fanout) and,
// unless queue is "", a durable queue bound to it with key.
func (n *Node) Declare(exchange, kind, queue, key string) {
	n.tb.Helper()
	err := n.do(func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(exchange, kind, true, false, false, false, nil); err != nil {
			return err
		}
		if queue == "" {
			return nil
		}
		if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(queue, key, exchange, false, nil)
	})
	if err != nil {
		n.tb.Fatalf("declare %s/%s: %v", exchange, queue, err)
	}
}

// Message is one message of a queue.
type Message struct {
	MessageID    string
	RoutingKey   string
	Exchange     string
	Body         string
	ContentType  string
	DeliveryMode uint8
	Headers      amqp.Table
}

// Header is the string header name of m, or "".
func (m Message) Header(name string) string {
	s, _ := m.Headers[name].(string)
	return s
}

// Messages reads every message of queue, in order, and leaves them in it
// (they are taken unacknowledged and requeued when the channel closes).
func (n *Node) Messages(queue string) []Message {
	n.tb.Helper()
	var out []Message
	err := n.do(func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(queue, false)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			out = append(out, Message{MessageID: d.MessageId, RoutingKey: d.RoutingKey, Exchange: d.Exchange,
				Body: string(d.Body), ContentType: d.ContentType, DeliveryMode: d.DeliveryMode, Headers: d.Headers})
		}
	})
	if err != nil {
		n.tb.Fatalf("read queue %s: %v", queue, err)
	}
	return out
}

// Count is the number of messages in queue, or -1 when the broker cannot
// be asked now (down, restarting).
func (n *Node) Count(queue string) int {
	count := -1
	n.do(func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err == nil {
			count = q.Messages
		}
		return err
	})
	return count
}

// Ctl runs rabbitmqctl against the node (add_user, set_permissions ...).
func (n *Node) Ctl(args ...string) string {
	n.tb.Helper()
	ctl := filepath.Join(filepath.Dir(n.bin), "rabbitmqctl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctl, append([]string{"-n", n.Name}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(n.Dir, "home"), "ERL_EPMD_PORT="+strconv.Itoa(n.epmdPort),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(n.Dir, "rabbitmq-env.conf"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		n.tb.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
