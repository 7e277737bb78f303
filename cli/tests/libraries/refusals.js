// Required first by the JS flows: every error reply ioredis reads that says "not emulated"
// (a command's error, or one among a transaction's replies) is written to standard error,
// where the Rust test looks for it, even when the library catches it and goes on.
const DataHandler = require("ioredis/built/DataHandler").default;

function report(reply) {
  if (reply instanceof Error && reply.message.includes("not emulated")) {
    console.error(`the server refused: ${reply.message}`);
  } else if (Array.isArray(reply)) {
    reply.forEach(report);
  }
}

const returnError = DataHandler.prototype.returnError;
DataHandler.prototype.returnError = function (err) {
  report(err);
  return returnError.call(this, err);
};
const returnReply = DataHandler.prototype.returnReply;
DataHandler.prototype.returnReply = function (reply) {
  report(reply);
  return returnReply.call(this, reply);
};
