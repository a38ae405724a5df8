// The publish form (exchanges and queues) and the messages that get and the stream
// browser return, in RabbitMQ's JSON.

import { api, path } from "./api.js";
import { field, form, h, input, keyValues, parseKeyValues, select, table, textarea } from "./dom.js";

// `exchange` "" is the default exchange, `amq.default` in paths; `routingKey` fixed (a
// queue's page) or asked for; `published` runs after each publish.
export function publishForm(vhost, exchange, routingKey, published = () => {}) {
  return form("Publish a message", [
    routingKey === undefined ? field("Routing key", input("routing_key")) : null,
    field("Delivery mode", select("delivery_mode", [["1", "1 - non-persistent"], ["2", "2 - persistent"]], "2")),
    field("Headers (key=value per line)", textarea("headers", { rows: 2 })),
    field("Properties (key=value per line, e.g. content_type=text/plain)", textarea("properties", { rows: 2 })),
    field("Payload", textarea("payload", { rows: 4 })),
  ], "Publish message", async (values) => {
    const properties = { ...parseKeyValues(values.properties), delivery_mode: Number(values.delivery_mode) };
    const headers = parseKeyValues(values.headers);
    if (Object.keys(headers).length) properties.headers = headers;
    const answer = await api("POST", path`/api/exchanges/${vhost}/${exchange || "amq.default"}/publish`, {
      properties,
      routing_key: routingKey === undefined ? values.routing_key : routingKey,
      payload: values.payload,
      payload_encoding: "string",
    });
    published();
    return answer && answer.routed === false ? "Message published, but not routed." : "Message published.";
  });
}

export function messageList(messages) {
  if (!messages.length) return h("p", { class: "empty" }, "No messages.");
  return h("div", { class: "messages" }, messages.map((message, index) => h("div", { class: "message" },
    h("h4", {}, `Message ${index + 1}`),
    table([
      { title: "Exchange", cell: (m) => m.exchange === "" ? "(AMQP default)" : m.exchange },
      { title: "Routing key", cell: (m) => m.routing_key },
      { title: "Redelivered", cell: (m) => (m.redelivered ? "yes" : "no") },
      { title: "Remaining", cell: (m) => m.message_count ?? "" },
      { title: "Properties", cell: (m) => keyValues(m.properties) },
      { title: "Payload", cell: (m) => `${m.payload_bytes} bytes, encoding ${m.payload_encoding}` },
    ], [message]),
    h("pre", { class: "payload" }, message.payload))));
}
