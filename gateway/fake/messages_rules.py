"""What Anthropic's Messages API refuses in a request's shape, refused by the fake in its words.

A fake that answers what the real API refuses hides exactly the translation bugs users meet
first: a chat or Responses conversation turned into Messages with a tool call left without its
result, a result without its call, an empty text block or a missing ``max_tokens`` is a 400 from
Anthropic. Each rule here is one Anthropic applies, worded as it words it (400
``invalid_request_error``), from answers quoted in the wild:

- "max_tokens: Field required": an API call shown with its request id in a write-up of
  Anthropic's errors (``req_011CZxXcfahryZyt6K7bmHjK``), and the same words in several
  clients' tests;
- "messages.N: `tool_use` ids were found without `tool_result` blocks immediately after: <ids>":
  quoted in many agents' bug reports (a LiteLLM AnthropicException, a crash report listing three
  ``toolu_`` ids, a table of measured answers: case G1);
- "messages.N.content.M: unexpected `tool_use_id` found in `tool_result` blocks: <id>. Each
  `tool_result` block must have a corresponding `tool_use` block in the previous message.":
  Claude Code's own "API Error: 400" with its request id (``req_011CSYUdcAcsufaZUQ4uDqv8``);
- "messages: text content blocks must be non-empty": quoted by agents that strip empty blocks
  before sending;
- "messages: text content blocks must contain non-whitespace text": a text block (or a turn's
  string content) of whitespace alone, which agents that pad empty blocks with " " or keep a
  reply of two newlines send (https://github.com/anthropics/claude-code/issues/23440 with its
  request id, https://github.com/nick1udwig/kibitz/issues/78,
  https://github.com/anomalyco/opencode/issues/31259). Judged in ``messages`` only: no answer
  quoted shows it for ``system``;
- "messages: final assistant content cannot end with trailing whitespace": a prefill (the last
  turn the assistant's) whose text ends in a space or a newline
  (https://github.com/tailcallhq/forgecode/issues/1872 with its request id,
  https://github.com/anomalyco/opencode/issues/1295);
- "This model does not support assistant message prefill. The conversation must end with a
  user message.": any prefill on the 4.6 generation and later (Claude 4.6 "What's new",
  breaking changes; quoted with request ids in
  https://github.com/Tarquinen/opencode-dynamic-context-pruning/issues/520 and
  https://github.com/smallmain/vscode-unify-chat-provider/issues/249). Told apart from older
  models as the thinking rule below tells them;
- "messages.N.role: Input should be 'user' or 'assistant'": a turn of another role than user,
  assistant or system, as Messages-compatible servers word it. A ``system`` turn is taken
  with or without a beta header: Anthropic's "Mid-conversation system messages" page
  (https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages) and
  Claude Opus 4.8's "What's new"
  (https://platform.claude.com/docs/en/about-claude/models/whats-new-claude-4-8: "Claude Opus
  4.8 accepts `role: "system"` messages immediately after a user turn in the `messages` array
  [...] No beta header is required."). Claude Code 2.1.197 named the beta
  ``mid-conversation-system-2026-04-07``, 2.1.332 names none, both send such turns (captured:
  tests/corpus/requests/). A tool call's result is looked for in the next turn past them. Not
  judged here: the models that refuse the role ("role 'system' is not supported on this
  model", anthropics/claude-code#61412);
- where a ``system`` turn may stand, the page's "Placement rules" (as Bedrock's copy words them,
  https://docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-mid-conversation-system.html:
  it "Cannot be the first entry in messages", "Must immediately follow a user message or an
  assistant message that ends in a server tool use", "Must either be the last entry in messages
  or be followed by an assistant turn", "Cannot be adjacent to another system message"), each
  refused in the words Anthropic answers it with. First: "messages.0: use the top-level 'system'
  parameter for the initial system prompt" (Claude Code's "API Error: 400",
  https://github.com/anthropics/claude-code/issues/64147); not after a user turn: "messages.N:
  role 'system' must follow a 'user' message or an 'assistant' message ending in a server tool
  result" (quoted in gateways' tests and changelogs only, no public report found); not before an
  assistant turn or the end (a second system turn included): "messages.N: role 'system' must
  precede an 'assistant' message or end the array" (with request ids in
  https://github.com/anthropics/claude-code/issues/73821). Answers quoted since July 2026 go on "; the
  directive-only form (content: [] with output_config) is accepted at any position", as the fake
  words them (https://github.com/diegosouzapw/OmniRoute/pull/10457, measured in production
  2026-08-15): a turn of that form is placed anywhere, and is not an empty turn either. An
  assistant turn ending in any ``…_tool_result`` or ``server_tool_use`` block counts as a server
  tool's, the fake's lenient reading of the two wordings;
- "messages: at least one message is required": the empty conversation;
- "messages.N: all messages must have non-empty content except for the optional final assistant
  message": a turn whose content is an empty list, anywhere but as the last turn, the
  assistant's (Claude Code's own "API Error: 400" with its request id
  ``req_011CSarLLj2ZRbTy4cWexMjs``, https://github.com/anthropics/claude-code/issues/6774; an
  answer with no content block kept in the history, https://github.com/corespeed-io/zypher-agent/pull/122).
  An empty string is answered as an empty text block, as before;
- "Requests which include `tool_use` or `tool_result` blocks must define tools.": a
  conversation holding a tool call or result sent without ``tools`` (or with ``tools: []``),
  what an agent's summary or compaction request is (``tool_choice: none`` with the tools still
  declared is how it is asked instead). The words are quoted with their envelope in
  https://github.com/anthropics/anthropic-sdk-python/issues/494; Bedrock's twin ("The
  toolConfig field must be defined when using toolUse and toolResult content blocks") is
  reported for compaction requests in 2026 (https://github.com/anomalyco/opencode/issues/10259,
  https://github.com/aws-samples/bedrock-access-gateway/pull/239), and agents written for
  the Claude 5 models still guard against the Anthropic one. Judged after a conversation's
  pairing of calls and results, whose words a request breaking both is answered with here.
- "messages.N.content.M: `tool_use` ids must be unique": one assistant turn calling two tools
  with the same id (https://github.com/trycua/cua/issues/524 with its request id
  ``req_011CUYeUkzHvfhenTVoAuGn4``; https://github.com/anthropics/claude-code/issues/20901, a
  single tool round, so the repeated id was inside turn 1). M is the second block with the id;
  an id repeated in a later turn is taken, as the measurements below found;
- "messages.N.content.M: each tool_use must have a single result. Found multiple `tool_result`
  blocks with id: <id>": one turn answering a call twice (quoted in LiteLLM's regression test for
  it, BerriAI/litellm tests/test_litellm/llms/anthropic/experimental_pass_through/adapters/
  test_anthropic_experimental_pass_through_adapters_transformation.py; the whole 400 through a
  Bedrock proxy, "messages.2.content.4: [...] with id: toolu_bdrk_01GA…", in
  https://github.com/JohnnyZ93/oai-compatible-copilot/issues/270). M is the second block with
  the id. Codex's code mode sends a script's output and each ``notify()`` it made as outputs of
  one call, which a translation must fold into one result;
- "messages.N: Did not find K `tool_result` block(s) at the beginning of this message. Messages
  following `tool_use` blocks must begin with a matching number of `tool_result` blocks.": a turn
  that answers every call of the one before but puts text (or anything else) before a result
  (https://github.com/anthropics/claude-code/issues/37, https://github.com/anthropics/claude-code/issues/303,
  https://github.com/apify/tester-mcp-client/issues/12; live-checked again in 2026 in
  https://github.com/QwenLM/qwen-code/issues/8161). K is the calls' count here: every quote
  says 1, for one call; text after the results is taken;
- "messages.N.content.M.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'": an id with a
  dot, a colon, a space or nothing at all, as other providers' ids are
  (https://github.com/BlockRunAI/ClawRouter/issues/17 with its request id
  ``req_011CXzyBavZTx2LemQWEXiSt``, https://github.com/RooCodeInc/Roo-Code/pull/10649). The whole
  id must match: a trailing newline is no letter. The same rule for ``tool_result.tool_use_id``
  is reported (https://github.com/maximhq/bifrost/issues/5097) but not in Anthropic's words, so a
  bad result id is left to the pairing rules above;
- "messages.N.content.M.tool_use.input: Input should be a valid dictionary": a call whose input
  is a JSON string, a list or null (https://github.com/anthropics/claude-code/issues/6696 with its
  request id ``req_011CSZ9vSpZLrRWFouS5LoMX``,
  https://github.com/anthropics/anthropic-sdk-typescript/issues/648);
- "messages.N.content.M.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png',
  'image/gif' or 'image/webp'": an image of another type (HEIC, or JPEG named ``image/jpg``), and
  "messages.N.content.M.tool_result.content.K.image.source…" for one inside a tool result
  (https://github.com/anthropics/claude-code/issues/5955);
- "messages.N.content.M.image.source.base64: image exceeds 5 MB maximum: B bytes > 5242880 bytes":
  an image whose base64 text is longer than 5 MiB (https://github.com/lobehub/lobehub/pull/14711,
  "messages.1.content.2.image.source.base64: image exceeds 5 MB maximum: 6275800 bytes > 5242880
  bytes", which found the limit counted on the base64 text, 4/3 of the file; Claude Code's own
  "API Error: 400" with its request id, https://github.com/anthropics/claude-code/issues/10612, and
  inside a tool result, https://github.com/anthropics/claude-code/issues/8227);
- "messages.N.content.M.image.source.base64.data: Image does not match the provided media type
  image/png": an image whose bytes start as another of the four types than its ``media_type`` says
  (Claude Code's "API Error: 400" with request ids: https://github.com/anthropics/claude-code/issues/15746,
  https://github.com/anthropics/claude-code/issues/13131, and for image/jpeg
  https://github.com/anthropics/claude-code/issues/11918). Told by the files' magic numbers (PNG's
  signature, JPEG's SOI marker, GIF87a/GIF89a, RIFF…WEBP); bytes of none of them ("Could not
  process image", claude-code #39146) are not judged. Both image rules hold in a tool result too,
  and both fail every later turn of a session that keeps the image in its history;
- "messages.N.content.M.image.source.base64.data: At least one of the image dimensions exceed max
  allowed size: 8000 pixels": an image wider or taller than 8000 pixels (Claude Code's "API Error:
  400", https://github.com/anthropics/claude-code/issues/5147 and
  https://github.com/anthropics/claude-code/issues/4778), and "... exceed max allowed size for
  many-image requests: 2000 pixels" for one over 2000 in a request of more than 20 images
  (https://github.com/anthropics/claude-code/issues/49537, /52220 and /24630, with request ids;
  the vision guide's "General limits", https://platform.claude.com/docs/en/build-with-claude/vision:
  "The maximal dimensions per image are 8000x8000 px. If you submit more than 20 images in one API
  request, this limit is reduced to 2000x2000 px."). Every image block counts, a tool result's and
  one by URL included; the sides are read from the file's header by the gateway's own reader
  (``translate/image_size.py``, tested on real files of each type), as the fake has no other;
- "Too much media: 0 document pages + N images > 100": more images than the guide's cap, "up to
  600 for API requests (100 for models with a 200k-token context window)" (the vision guide),
  worded as Claude Code's sessions were refused (https://github.com/anthropics/claude-code/issues/3397,
  /19822 and /24541, with request ids). Judged where the fake knows the model's window
  (``most_images``: 1M on Opus and Sonnet 4.6 and later, Haiku 5.5, Fable and Mythos 5, each
  model's overview page; 200k on the older ones) and counted as the rule above counts; a PDF's
  pages are not read here, and count 0.

And on the rest of the request:

- "tools: Tool names must be unique.": two tools of one name, client tools or Anthropic's server
  tools alike (Claude Code's "API Error: 400" with its request id ``req_011CUer5Hnhm1QQWCAASQRbD``,
  https://github.com/anthropics/claude-code/issues/10687; a built-in ``web_search`` beside an MCP
  one, https://github.com/danny-avila/LibreChat/issues/13162, where the same agent on OpenAI's
  models is taken, as in https://github.com/eclipse-theia/theia/issues/16122);
- "tools.N.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'": a client tool
  (no ``type``, or ``custom``) named with a dot, a slash or a space, as MCP servers name theirs
  (https://github.com/netclaw-dev/netclaw/issues/1133,
  https://github.com/modelcontextprotocol/modelcontextprotocol/issues/1345; before the limit
  was raised the same words said ``{1,64}``). Anthropic's server tools (``web_search_20250305``,
  ``bash_20250124``) carry a ``type`` and names of its own, and are not judged;
- "tools.N.custom.input_schema.type: Field required": a client tool whose schema says no ``type``
  at all (https://github.com/Kilo-Org/kilocode/issues/12238, answered by api.anthropic.com);
- "tools.N.custom.input_schema.type: Input should be 'object'": a client tool whose schema's top
  ``type`` is anything else (an array, ``["object", "null"]``, Google's ``"OBJECT"``), with request
  ids in https://github.com/Joouis/agent-maestro/issues/163; and "tools.N.custom.input_schema: JSON
  schema is invalid. It must match JSON Schema draft 2020-12 (https://json-schema.org/draft/2020-12).
  Learn more about tool use at https://platform.claude.com/docs/en/agents-and-tools/tool-use/overview.":
  one whose nested schema does not (https://github.com/anthropics/claude-code/issues/86664 with its
  request id; before that the link read https://docs.claude.com/en/docs/tool-use,
  https://github.com/anthropics/claude-code/issues/54439). Judged here: a ``type`` that is no JSON
  Schema type name, or a count (``minItems``, ``maxLength``…) that is no non-negative integer
  (``"1"``), at any depth;
- "stop_sequences: each stop sequence must contain non-whitespace": ``stop: ["\\n"]`` carried
  over from chat (https://github.com/BerriAI/litellm/issues/3286, fixed for every kind of
  whitespace in https://github.com/BerriAI/litellm/pull/7484);
- "metadata.user_id: user_id appears to contain an email address.": an end user's address
  passed on as the user id (https://github.com/BerriAI/litellm/issues/10106). Anthropic's
  answer goes on ("Please send a uuid or hash value in …") past where that quote is cut; the
  fake stops at the quoted sentence;
- ``"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and
  "output_config.effort" to control thinking behavior.``: a thinking budget sent to a model
  that only thinks adaptively
  (https://github.com/zhukunpenglinyutong/jetbrains-cc-gui/issues/1003, request id
  ``req_011CaUUB15WGRCpQ2TQoFS2c``; measured on claude-opus-5, claude-fable-5, claude-opus-4-8
  and claude-sonnet-5 in https://github.com/handochan/aelix-ai/issues/258);
- "'claude-3-5-sonnet-20241022' does not support thinking.": thinking of either type on Claude 3
  and 3.5 (https://github.com/anthropics/claude-code/issues/2245, the corpus's
  anthropic-400-model-does-not-support-thinking), the model named as the request names it;
  thinking came with Claude 3.7 Sonnet;
- "adaptive thinking is not supported on this model": adaptive thinking sent to a model before
  4.6 (measured on claude-opus-4-5, claude-sonnet-4-5 and claude-haiku-4-5 in
  https://github.com/askalf/dario/pull/273; https://github.com/vellum-ai/vellum-assistant/pull/37276).
  Which model takes which is ``thinking_types`` below, from Anthropic's thinking guide
  (https://platform.claude.com/docs/en/build-with-claude/thinking) and Bedrock's
  (https://docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-adaptive-thinking.html);
- with thinking on (``enabled`` or ``adaptive``), what the thinking guide's "Feature
  compatibility" rules out, each in the words of one quoted answer:
  "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. Please
  consult our documentation at https://platform.claude.com/docs/en/build-with-claude/extended-thinking"
  (https://github.com/dotCipher/opencode-claude-bridge/pull/1, checked there against the API;
  the whole answer with its request id ``req_011CeGW3dHhfESHqMhHXtABt`` in a probe record);
  "`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled. Please
  consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking"
  (https://errs.dmxapi.cn/detail.php?id=2069, relayed from claude-sonnet-4-6);
  "`top_k` must be unset when thinking is enabled. Please consult our documentation at
  https://docs.claude.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking"
  (https://github.com/quarkiverse/quarkus-langchain4j/issues/1812; later answers are quoted, in
  gateways' code only, as "… when thinking is enabled or in adaptive mode");
  "Thinking may not be enabled when tool_choice forces tool use." (``tool_choice`` ``any`` or
  ``tool``: https://github.com/mastra-ai/mastra/issues/7507,
  https://github.com/can1357/oh-my-pi/issues/341);
- 'tool_choice: type "tool" and "any" are not supported for this model.': a forced tool choice
  (``any``, or ``tool`` with a name), thinking or not, on the models that refuse forcing outright:
  Claude Fable 5.1 and Mythos 5.1 ("Forcing a tool call with {type: "any"} or {type: "tool",
  name: "..."} returns a 400 error", https://platform.claude.com/docs/en/models/fable-5-1/migration-guide),
  Opus 5.5 and Sonnet 5.5 ("Forced tool use returns an error", their "What's new" pages), and
  Fable and Mythos 5.2, which take back none of 5.1's changes (``FORCING_REFUSED``). The words are
  quoted in https://github.com/UKGovernmentBEIS/inspect_ai/pull/5176 and in others' live runs.
  Fable 5, Mythos 5, Opus 5 and Sonnet 5 take a forced choice; ``claude-mythos-preview`` is not
  judged;
- '"thinking.type.disabled" is not supported for this model. Use "thinking.type.adaptive" and
  "output_config.effort" to control thinking behavior.': thinking turned off on the models that
  think on every request: the same ones and Fable and Mythos 5 (``DISABLED_REFUSED``; "Both
  thinking: {type: "disabled"} and manual extended thinking [...] return a 400 error", the Fable 5
  migration guide): "Turning thinking off or setting a
  thinking budget is rejected" (the Opus 5.5 migration guide, which names the set that came with
  Fable 5.1), and Sonnet 5.5's lists ``thinking: {"type": "disabled"}`` among its 400s. Quoted as
  answered live on Opus 5.5 (dev.to/persimmoq, "5 settings that return 400 when you only change
  the model name", 2026-10-06). Opus 5's refusal of it at effort xhigh or max is not judged: its
  words are not quoted;
- "`temperature` is deprecated for this model." (https://github.com/RooCodeInc/Roo-Code/issues/12162;
  on Opus 4.7, https://github.com/TestPlanIt/testplanit/issues/220), "`top_p` is deprecated for
  this model." and "`top_k` is deprecated for this model." (claude-sonnet-5, with request ids
  ``req_011Ce9LTti8KXAoFmn7SW8xU`` and ``req_011Ce9LTvBRxmGvwNhJ8xESc`` in a probe record): any
  of the three, whatever its value, on the models that think adaptively only (Opus 4.7 on, the 5
  generation, Fable and Mythos: ``thinking_types``). Anthropic's migration guide: "The
  `temperature`, `top_p`, and `top_k` parameters are no longer accepted on Claude Opus 4.7.
  Requests that include them return a 400 error."; it says Sonnet 5 takes a parameter at its
  default, a probe of Sonnet 5 found 0 and 1 refused alike: the fake refuses every value. Judged
  before the thinking rules below, whose words a model that takes sampling gets;
- with thinking on, the tool-loop rule: "messages.N.content.0.type: Expected `thinking` or
  `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant`
  message must start with a thinking block (preceeding the lastmost set of `tool_use` and
  `tool_result` blocks). …" (https://github.com/anomalyco/opencode/issues/3077,
  https://github.com/Kilo-Org/kilocode/issues/5219): the last assistant turn, when it called a
  tool, starts with its thinking or redacted_thinking block. Judged only for a turn whose calls
  the fake answered with thinking, or answered to a request that asked none (``thought_calls``,
  ``unthought_calls``, less any id it also answered to a request that asked for it: such a turn
  cannot have had thinking, as one after a gateway turned it off,
  https://platform.claude.com/docs/build-with-claude/thinking-tool-workflows: "a tool-use loop is
  one assistant turn, so change the configuration only between turns"); not for a turn the fake
  answered without thinking to a request that asked for it: its default answers think not at all,
  and Claude Code, which asks for thinking, replays those as they came. A request without any
  ``thinking`` asks for it on the models that think unasked (Opus and Sonnet 5 and later, Fable
  and Mythos 5 and later: ``THINKS_UNASKED``): "on Claude Opus 5, the same requests run with
  adaptive thinking" (https://platform.claude.com/docs/en/models/opus-5/migration-guide; "thinking:
  {"type": "adaptive"} remains valid and equivalent to the default",
  https://github.com/aws-samples/anthropic-on-aws/pull/261; "With Opus 5, omitting `thinking`
  still runs adaptive thinking", https://github.com/promptfoo/promptfoo/pull/10210; Sonnet 5:
  "adaptive thinking is on by default", its migration guide; the 5.5 models, Fable and Mythos
  think on every request), so the rule holds there too, but for a forced ``tool_choice``, which
  those of them that take one take without thinking;
- a thinking block sent back must carry the signature it was issued with (the thinking guide,
  "Preserving thinking blocks": blocks come back complete and unmodified):
  "messages.N.content.M.thinking.signature: Field required" without one, and "messages.N.content.M:
  Invalid `signature` in `thinking` block" for an empty one or, where the fake signed the
  block itself (``messages.sign``, a digest of the text), one that does not match its text or
  was given to a key of another organization (``FakeUpstream.orgs``: signatures hold only for
  the account that got them, https://github.com/riba2534/happyclaw/issues/474).
  Anthropic's own signatures (the corpus's answers) are taken: the fake cannot check them;
- a thinking block is bound to what preceded it on the models with preserved thinking (Claude
  Fable 5.1 and later, Opus, Sonnet and Haiku 5.5; ``preserves_thinking``): replayed after a
  ``system``, ``tools`` or earlier message that changed, or after one left out, it and every
  later one are refused, "messages.N.content.M: Invalid `signature` in `thinking` block. The
  block is bound to a different conversation. Remove the block, or set
  `thinking.block_binding.prefix_mismatch_behavior` to \"drop_block\"."
  (https://platform.claude.com/docs/en/build-with-claude/preserved-thinking and its "Fix a
  thinking block bound to a different conversation", which quotes the answer; enforced by
  default for accounts made since 2026-08-31, as the fake's are). The fake remembers the prefix
  each block it answered with was produced under (``bound_thinking``: a digest of the request's
  ``system``, ``tools`` and messages, which its reply follows; ``prefix``) and refuses the block
  replayed behind any other: a tool list narrowed or widened, a system text added, a message
  before it edited, dropped or added. With ``prefix_mismatch_behavior: "drop_block"`` the API
  drops the block instead, and the fake takes the request. That field needs the beta
  ``thinking-binding-controls-2026-08-01``; without it "thinking.adaptive.block_binding: Extra
  inputs are not permitted" (Amazon Bedrock's "Preserved thinking" page,
  https://docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-thinking-block-binding.html;
  the fix page: "If the error still asks for the header, the header did not arrive"), the type
  named as the request names it;
- "`temperature` and `top_p` cannot both be specified for this model. Please use only one.": both
  samplers on the models the answers name: Opus 4.1 (https://github.com/anomalyco/opencode/issues/1644,
  where Opus 4.0 took the same request; https://github.com/open-webui/pipelines/pull/546), Sonnet 4.5
  and Haiku 4.5 (https://github.com/di-sukharev/opencommit/issues/520 with its request id
  ``req_011CUK6BqmnBWwnEtihUBmak``, https://github.com/langfuse/langfuse/issues/9882), Sonnet 4.6
  (https://github.com/Vali-98/ChatterUI/issues/564, https://github.com/anomalyco/opencode/issues/28930
  with its request id), Opus 4.6 (https://github.com/OpenHands/OpenHands/pull/12909) and Opus 4.5
  (claude-opus-4-5-20251101: https://github.com/SalesforceAIResearch/MCP-Universe/issues/49,
  https://github.com/OpenHands/OpenHands/issues/11838). Other models are not judged (``ONE_SAMPLER``);
- with thinking ``enabled``, "thinking.enabled.budget_tokens: Input should be greater than or equal
  to 1024" (https://github.com/danny-avila/LibreChat/issues/8346, relayed by Bedrock;
  https://github.com/tingly-dev/tingly-box/pull/569) and "`max_tokens` must be greater than
  `thinking.budget_tokens`. Please consult our documentation at
  https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
  (https://github.com/liuw1535/antigravity2api-nodejs/issues/149 and /150, with request ids). The
  second not with the ``interleaved-thinking-…`` beta: the extended-thinking guide lets the budget
  span a whole tool loop then, above ``max_tokens``;
- "messages.N.content.M.cache_control.ttl: a ttl='1h' cache_control block must not come after a
  ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`,
  `system`, `messages`." (https://github.com/cnighswonger/claude-code-cache-fix/issues/44 with its
  request id ``req_011CaDiCPMJmSHftLTxsGesd``, https://github.com/headroomlabs-ai/headroom/issues/2939):
  a breakpoint without a ``ttl`` is a five-minute one. The answers quoted name a block in
  ``messages``; one in ``system`` or ``tools`` is named ``system.M`` / ``tools.M`` here, the
  fake's choice;
- "A maximum of 4 blocks with cache_control may be provided. Found N.": breakpoints counted over
  the tools, the system blocks and the messages' blocks (https://github.com/Wei-Shaw/sub2api/issues/176,
  https://github.com/tghamm/Anthropic.SDK/issues/50), and a top-level ``cache_control``: "When used
  together, the automatic cache breakpoint uses one of the 4 available breakpoint slots", "If 4
  explicit block-level breakpoints already exist, the API returns a 400 error" (the prompt-caching
  guide's "Combining with block-level caching", quoted in
  https://github.com/UKGovernmentBEIS/inspect_ai/issues/4505; the words of that 400 are the fake's);
- "output_config.format.schema: For 'object' type, 'additionalProperties' must be explicitly set
  to false": structured output whose schema leaves an object, at any depth, open
  (https://github.com/veryfront/veryfront-code/issues/3918, and as ``output_format.schema``, the
  beta's field, https://github.com/ax-llm/ax/issues/458); with ``"additionalProperties": true``,
  "For 'object' type, 'additionalProperties: true' is not supported. Please set
  'additionalProperties' to false" (https://github.com/BerriAI/litellm/issues/35808). Judged
  before those, a schema with a ``type`` JSON Schema does not have, Google's upper-case ``"OBJECT"``:
  "output_config.format.schema: Invalid JSON Schema in output format: {'type': 'OBJECT', …} is not
  valid under any of the given schemas", the schema as Python prints it
  (https://github.com/hugomossberg/Babel/issues/12, every call of a Gemini-style schema refused).
  Where several nested schemas are mistyped, the fake names the outermost: its choice, as the one
  quoted answer does not tell;
- "output_config.format.schema: Schema type 'oneOf' is not supported" (and ``output_format.schema``,
  the beta's field, as https://github.com/vercel/ai's changeset "fix(anthropic): convert oneOf to
  anyOf in tool and output_format schemas" quotes it; the ``output_config`` form from live runs
  against zod's discriminated unions): a ``oneOf`` anywhere in a structured-output schema. The
  structured-outputs guide's "JSON Schema limitations" support "`anyOf` and `allOf` (with
  limitations)" and no ``oneOf``; judged after the mistyped schema above. A tool that is not strict
  takes it;
- a prefilled answer (the last turn the assistant's) beside ``output_config.format`` or
  ``output_format``: the structured-outputs guide's "Feature compatibility" lists "Message
  Prefilling: Incompatible with JSON outputs"
  (https://platform.claude.com/docs/en/build-with-claude/structured-outputs). No answer to it is
  quoted anywhere found: "output_config.format: structured outputs cannot be used with a
  prefilled assistant message" is the fake's own wording, on models that take a prefill (the
  4.6 generation on refuses the prefill itself first);
- structured output whose schema holds a constraint the grammar cannot enforce: the
  structured-outputs guide's "JSON Schema limitations" list numerical constraints (``minimum``,
  ``maximum``, ``multipleOf``…), string constraints (``minLength``, ``maxLength``) and array
  constraints beyond a ``minItems`` of 0 or 1 as not supported
  (https://platform.claude.com/docs/en/build-with-claude/structured-outputs). Refused as
  "output_config.format.schema: For 'integer' type, property 'minimum' is not supported"
  (https://github.com/agentjido/req_llm/issues/302, as ``output_format.schema``), "For 'array'
  type, property 'maxItems' is not supported" (https://github.com/DaKheera47/job-ops/pull/654);
  with several on one schema, "For 'integer' type, properties maximum, minimum are not
  supported" (https://github.com/BerriAI/litellm/issues/21016, and for a strict tool
  https://github.com/earendil-works/pi/issues/9953); and "For 'array' type, 'minItems' values
  other than 0 or 1 are not supported" (https://github.com/ghostlobster/memorize-everything/issues/93;
  a later quote adds "(got: [2, 5])", left out here). The fake words ``maxLength``, ``minLength``,
  ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf`` and ``uniqueItems`` in the same
  template, the docs naming them unsupported, and names several in alphabetical order (as the
  quote does: its own choice where that is chance). A ``pattern``, a ``format`` and
  ``minItems`` 0 or 1 are taken (the docs list them as supported). Only structured output is
  judged: the gateway sends no strict tools, and a tool that is not strict takes any draft
  2020-12 schema.

The order the rules are checked in, where a request breaks more than one, is the fake's own.
What the same measurements found Anthropic accepts is accepted here too: two assistant turns
in a row, and one ``tool_use`` id used again in a later turn. So is a conversation that opens on an
assistant turn: "messages: first message must use the \"user\" role" was Anthropic's answer in 2024
(https://github.com/lobehub/lobehub/issues/1601, https://github.com/mckaywrigley/chatbot-ui/issues/1656),
but from December 2024 the API took it where Bedrock still refused it
(https://github.com/anthropics/anthropic-sdk-typescript/issues/622: ``[assistant, user]`` answered
"Blue" on Anthropic, "400 messages: first message must use the \"user\" role" on Bedrock), the API
reference (https://platform.claude.com/docs/en/api/messages/create) dropped its "The first message
must always use the `user` role" (its ``messages`` now reads "You can specify a single `user`-role
message, or you can include multiple `user` and `assistant` messages", as the SDKs generated from
it do), and no answer from Anthropic's own API with those words is reported since.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Collection, Mapping
from typing import Any, TypeGuard

from gateway.fake.messages import SIGNATURE_MARK, anthropic_error, sign
from gateway.fake.schemas import miscounted, mistyped, objects, schemas
from gateway.fake.steps import Reply
from gateway.translate.image_size import dimensions

ENABLED = frozenset({"enabled"})
BOTH = frozenset({"enabled", "adaptive"})
ADAPTIVE = frozenset({"adaptive"})

# "claude-opus-4-8-20260501", "claude-sonnet-4-20250514" (4.0: the date is no minor version),
# "us.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-fable-5", "claude-mythos-preview";
# and the older order, "claude-3-7-sonnet-20250219".
_NAMED = re.compile(r"claude-(?P<family>opus|sonnet|haiku|fable|mythos)"
                    r"(?:-(?P<major>\d+)(?!\d)(?:-(?P<minor>\d{1,2})(?!\d))?)?")  # fmt: skip
_NUMBERED = re.compile(r"claude-(?P<major>\d+)(?:-(?P<minor>\d))?-(?:opus|sonnet|haiku)")
_CUSTOM_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")
INTERLEAVED = "interleaved-thinking"
# The beta ``thinking.block_binding`` is refused without (``_unbound``).
BINDING_BETA = "thinking-binding-controls-2026-08-01"
# From which version on a line thinks on every request, refusing a forced tool_choice and thinking
# turned off (``_always_thinks``).
FORCING_REFUSED = {"fable": (5, 1), "mythos": (5, 1), "opus": (5, 5), "sonnet": (5, 5)}
# From which version on a line thinks on a request that sends no ``thinking`` (``_thinking``).
THINKS_UNASKED = {"fable": (5, 0), "mythos": (5, 0), "opus": (5, 0), "sonnet": (5, 0)}
# From which version on a line refuses thinking turned off: Fable and Mythos 5 already ("Both
# thinking: {type: "disabled"} and manual extended thinking [...] return a 400 error", the Fable 5
# migration guide), though they take a forced tool.
DISABLED_REFUSED = {**FORCING_REFUSED, "fable": (5, 0), "mythos": (5, 0)}
_NOT_FORCED = 'tool_choice: type "tool" and "any" are not supported for this model.'
_WITH_PREFILL = "structured outputs cannot be used with a prefilled assistant message"
# (family, major, minor) of the models that refuse temperature and top_p together.
ONE_SAMPLER = frozenset({("opus", 4, 1), ("opus", 4, 5), ("opus", 4, 6), ("sonnet", 4, 5), ("sonnet", 4, 6),
                         ("haiku", 4, 5)})  # fmt: skip
_BUDGET_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
_TTL = ("cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. "
        "Note that blocks are processed in the following order: `tools`, `system`, `messages`.")  # fmt: skip
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_IMAGE_WORDS = "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
IMAGE_MAX = 5 * 1024 * 1024  # of base64 text
MOST_IMAGES, MOST_IMAGES_LONG = 100, 600  # a request's images on a 200k window, on a larger one
# The first version of each family with a context window of 1M tokens (``most_images``).
_LONG_WINDOW_FROM = {"opus": (4, 6), "sonnet": (4, 6), "haiku": (5, 5), "fable": (5, 0), "mythos": (5, 0)}
# Pixels a side, and in a request of more than MANY_IMAGES images (``_unreadable``).
SIDE_MAX, MANY_IMAGES, MANY_SIDE_MAX = 8000, 20, 2000
_SIDES = "image.source.base64.data: At least one of the image dimensions exceed max allowed size"
_DRAFT = ("JSON schema is invalid. It must match JSON Schema draft 2020-12 (https://json-schema.org/draft/2020-12). "
          "Learn more about tool use at https://platform.claude.com/docs/en/agents-and-tools/tool-use/overview.")  # fmt: skip
_THOUGHT = ("thinking", "redacted_thinking")
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
# The constraints structured outputs refuse, by the type they constrain (minItems: past 1).
_UNSUPPORTED = {"integer": _NUMERIC, "number": _NUMERIC, "string": ("minLength", "maxLength"),
                "array": ("maxItems", "uniqueItems")}  # fmt: skip
# Anchored on the "@" (a possessive-free scan from every start was quadratic: a 300 KB id
# without one held the fake's CPU until it was killed).
_EMAIL = re.compile(r"(?<=[^@\s])@[^@\s]+\.[^@\s]")
_ANY_POSITION = "; the directive-only form (content: [] with output_config) is accepted at any position"
_DOCS = ("Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
         "#important-considerations-when-using-extended-thinking")  # fmt: skip


# Anthropic's limit on a Messages (and token-counting) request's body: "The API has a maximum
# request size of 32 MB for standard endpoints, including the Messages API and Token Counting
# API. If you exceed this limit, you'll receive a 413 request_too_large error from Cloudflare."
# (the API overview's "Request size limits", https://platform.claude.com/docs/en/api/overview;
# the errors page lists the same). Its MB taken as its image limit's is, 1024 x 1024 bytes
# ("5 MB maximum: ... > 5242880 bytes"). The body, "Request exceeds the maximum size", is quoted
# in https://github.com/anthropics/claude-code/issues/10314 (the corpus's
# anthropic-413-bytes-is-not-overflow).
REQUEST_MAX = 32 * 1024 * 1024


def too_large(path: str, size: int) -> Reply | None:
    """Anthropic's 413 for a Messages request body of ``size`` bytes, or None. Answered before
    anything else, the key included: Cloudflare answers it before the API sees the request."""
    if size > REQUEST_MAX and path.endswith(("/v1/messages", "/v1/messages/count_tokens")):
        return anthropic_error(413, "request_too_large", "Request exceeds the maximum size")
    return None


def refusal(
    path: str, payload: dict[str, Any], headers: Mapping[str, str], thought: Collection[str] = frozenset(),
    org: str | None = None, bound: Mapping[str, Collection[str]] | None = None,
) -> Reply | None:
    """Anthropic's 400 for this Messages request, or None when Anthropic takes it. ``thought``:
    the tool_use ids the fake answered together with a thinking block (``thought_calls``);
    ``org``: the organization of the key that sent it (whose signatures hold); ``bound``: the
    prefixes each thinking block the fake answered with was produced under (``bound_thinking``)."""
    if not path.endswith("/messages"):
        return None
    betas = headers.get("anthropic-beta", "")
    why = _why(payload, betas, thought, org) or _unbound(payload, bound or {}, betas)
    if why is None:
        return None
    return anthropic_error(400, "invalid_request_error", why)


def thinking_types(model: Any) -> frozenset[str] | None:
    """The ``thinking.type`` values Anthropic takes on this model besides "disabled", or None for
    a model the fake does not know (not judged): Opus 4.7 and later, Claude 5 and the Fable and
    Mythos families think adaptively only, Opus and Sonnet 4.6 both ways, older models with a
    budget only, and Claude 3 and 3.5 not at all."""
    if not isinstance(model, str):
        return None
    named = _NAMED.search(model)
    if named is not None and named["family"] in ("fable", "mythos"):
        return ADAPTIVE
    found = named if named is not None and named["major"] else _NUMBERED.search(model)
    if found is None:
        return None
    version = (int(found["major"]), int(found["minor"] or 0))
    if version < (3, 7):
        return frozenset()  # thinking came with Claude 3.7 Sonnet
    return ADAPTIVE if version >= (4, 7) else BOTH if version == (4, 6) else ENABLED


def _why(payload: dict[str, Any], betas: str, thought: Collection[str], org: str | None = None) -> str | None:
    if "max_tokens" not in payload:
        return "max_tokens: Field required"
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return None  # the fake's other checks answer a body of the wrong shape
    return (_tool_name(payload.get("tools")) or _unique_names(payload.get("tools"))
            or _input_schema(payload.get("tools"))
            or _stop_sequences(payload.get("stop_sequences")) or _budget_floor(payload.get("thinking"))
            or _user_id(payload.get("metadata")) or _tool_blocks(messages)
            or _conversation(messages) or _too_much_media(payload.get("model"), messages)
            or _undeclared_tools(payload.get("tools"), messages) or _prefill(payload.get("model"), messages)
            or _prefill_with_format(payload, messages)
            or _signatures(messages, org) or _removed_samplers(payload) or _samplers(payload)
            or _forced_tool(payload) or _thinking(payload, thought, INTERLEAVED in betas)
            or _breakpoints(payload, messages) or _ttl_order(payload, messages) or _output_schema(payload))  # fmt: skip


def _tool_blocks(messages: list[Any]) -> str | None:
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        seen: set[Any] = set()
        for j, block in enumerate(_blocks(message)):
            if block.get("type") != "tool_use":
                continue
            call_id = block.get("id")
            if isinstance(call_id, str) and not _TOOL_USE_ID.fullmatch(call_id):
                return f"messages.{i}.content.{j}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
            if "input" in block and not isinstance(block["input"], dict):
                return f"messages.{i}.content.{j}.tool_use.input: Input should be a valid dictionary"
            if call_id in seen:
                return f"messages.{i}.content.{j}: `tool_use` ids must be unique"
            seen.add(call_id)
    return None


def _conversation(messages: list[Any]) -> str | None:
    if not messages:
        return "messages: at least one message is required"
    many = _images(messages) > MANY_IMAGES
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if message.get("role") not in ("user", "assistant", "system"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        final_assistant = i == len(messages) - 1 and message.get("role") == "assistant"
        if message.get("content") == [] and not final_assistant and not _directive(message):
            return f"messages.{i}: all messages must have non-empty content except for the optional final assistant message"
        blank = next((why for b in _blocks(message) if (why := _blank_text(b))), None)
        if blank is not None:
            return blank
        image = _image_type(message, f"messages.{i}.content", many)
        if image is not None:
            return image
        placed = _misplaced_system(messages, i)
        if placed is not None:
            return placed
    turns = [(i, m) for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") != "system"]
    for k, (i, message) in enumerate(turns):
        if message.get("role") == "assistant":
            asked = [b.get("id") for b in _blocks(message) if b.get("type") == "tool_use"]
            following = turns[k + 1][1] if k + 1 < len(turns) else None
            answered = {b.get("tool_use_id") for b in _blocks(following)} if following is not None else set()
            missing = [str(t) for t in asked if t not in answered]
            if asked and missing:
                return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                        f"after: {', '.join(missing)}")  # fmt: skip
            if asked and following is not None:
                leading = next((n for n, b in enumerate(_blocks(following)) if b.get("type") != "tool_result"),
                               len(_blocks(following)))  # fmt: skip
                if leading < len(asked):
                    return (f"messages.{turns[k + 1][0]}: Did not find {len(asked)} `tool_result` block(s) at the "
                            "beginning of this message. Messages following `tool_use` blocks must begin with a "
                            "matching number of `tool_result` blocks.")  # fmt: skip
        else:
            before = turns[k - 1][1] if k else None
            called = set()
            if before is not None and before.get("role") == "assistant":
                called = {b.get("id") for b in _blocks(before) if b.get("type") == "tool_use"}
            results: set[Any] = set()
            for j, block in enumerate(_blocks(message)):
                if block.get("type") != "tool_result":
                    continue
                if block.get("tool_use_id") not in called:
                    return (f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                            "`tool_use` block in the previous message.")  # fmt: skip
                if block.get("tool_use_id") in results:
                    return (f"messages.{i}.content.{j}: each tool_use must have a single result. Found multiple "
                            f"`tool_result` blocks with id: {block.get('tool_use_id')}")  # fmt: skip
                results.add(block.get("tool_use_id"))
    return _trailing_whitespace(messages[-1])


def _directive(message: dict[str, Any]) -> bool:
    return message.get("role") == "system" and message.get("content") == [] and "output_config" in message


def _misplaced_system(messages: list[Any], i: int) -> str | None:
    message = messages[i]
    if message.get("role") != "system" or _directive(message):
        return None
    if i == 0:
        return f"messages.0: use the top-level 'system' parameter for the initial system prompt{_ANY_POSITION}"
    before = messages[i - 1] if isinstance(messages[i - 1], dict) else {}
    if before.get("role") != "user" and not _ends_in_server_tool(before):
        return (f"messages.{i}: role 'system' must follow a 'user' message or an 'assistant' message ending "
                f"in a server tool result{_ANY_POSITION}")  # fmt: skip
    after = messages[i + 1] if i + 1 < len(messages) and isinstance(messages[i + 1], dict) else None
    if after is not None and after.get("role") != "assistant":
        return f"messages.{i}: role 'system' must precede an 'assistant' message or end the array{_ANY_POSITION}"
    return None


def _ends_in_server_tool(message: dict[str, Any]) -> bool:
    blocks = _blocks(message) if message.get("role") == "assistant" else []
    kind = str(blocks[-1].get("type", "")) if blocks else ""
    return kind == "server_tool_use" or kind.endswith("_tool_result")


def _undeclared_tools(tools: Any, messages: list[Any]) -> str | None:
    if tools:
        return None
    kinds = {b.get("type") for m in messages if isinstance(m, dict) for b in _blocks(m)}
    if kinds & {"tool_use", "tool_result"}:
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return None


def _prefill(model: Any, messages: list[Any]) -> str | None:
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return None
    if thinking_types(model) in (BOTH, ADAPTIVE):  # the 4.6 generation and later
        return "This model does not support assistant message prefill. The conversation must end with a user message."
    return None


def _prefill_with_format(payload: dict[str, Any], messages: list[Any]) -> str | None:
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return None
    config = payload.get("output_config")
    for field, form in (("output_config.format", config.get("format") if isinstance(config, dict) else None),
                        ("output_format", payload.get("output_format"))):  # fmt: skip
        if isinstance(form, dict):
            return f"{field}: {_WITH_PREFILL}"
    return None


def _blank_text(block: dict[str, Any]) -> str | None:
    if block.get("type") == "tool_result":
        # A result's text is held to the same rule (NousResearch/hermes-agent#97641: a
        # whitespace-only string result is refused so; zed-industries/zed#27130: an empty one).
        inner = block.get("content")
        if isinstance(inner, str):
            return _blank_text({"type": "text", "text": inner})
        parts = [p for p in inner if isinstance(p, dict)] if isinstance(inner, list) else []
        return next((why for p in parts if (why := _blank_text(p))), None)
    text = block.get("text")
    if block.get("type") != "text" or not isinstance(text, str):
        return None
    if text == "":
        return "messages: text content blocks must be non-empty"
    if text.isspace():
        return "messages: text content blocks must contain non-whitespace text"
    return None


def _images(messages: list[Any]) -> int:
    """The image blocks of a conversation, those inside a tool result included."""
    blocks = [b for m in messages if isinstance(m, dict) for b in _blocks(m)]
    inner = [b.get("content") for b in blocks if b.get("type") == "tool_result"]
    blocks += [p for parts in inner if isinstance(parts, list) for p in parts if isinstance(p, dict)]
    return sum(1 for b in blocks if b.get("type") == "image")


def most_images(model: Any) -> int | None:
    """The most images a request takes on this model (the vision guide's cap by context window),
    or None for a model whose window the fake does not know (not judged)."""
    named = _NAMED.search(model) if isinstance(model, str) else None
    if named is not None and named["major"]:
        version = (int(named["major"]), int(named["minor"] or 0))
        return MOST_IMAGES_LONG if version >= _LONG_WINDOW_FROM[named["family"]] else MOST_IMAGES
    return MOST_IMAGES if isinstance(model, str) and _NUMBERED.search(model) else None


def _too_much_media(model: Any, messages: list[Any]) -> str | None:
    most, count = most_images(model), _images(messages)
    if most is None or count <= most:
        return None
    return f"Too much media: 0 document pages + {count} images > {most}"


def _image_type(message: dict[str, Any], where: str, many: bool = False) -> str | None:
    for j, block in enumerate(_blocks(message)):
        inner = block.get("content") if block.get("type") == "tool_result" else None
        for k, part in enumerate(inner if isinstance(inner, list) else ()):
            why = _unreadable(part, many) if isinstance(part, dict) else None
            if why is not None:
                return f"{where}.{j}.tool_result.content.{k}.{why}"
        why = _unreadable(block, many)
        if why is not None:
            return f"{where}.{j}.{why}"
    return None


def _unreadable(block: dict[str, Any], many: bool = False) -> str | None:
    source = block.get("source") if block.get("type") == "image" else None
    if not isinstance(source, dict) or source.get("type") != "base64":
        return None
    media_type, data = source.get("media_type"), source.get("data")
    if media_type not in _IMAGE_TYPES:
        return f"image.source.base64.media_type: {_IMAGE_WORDS}"
    if not isinstance(data, str):
        return None
    if len(data) > IMAGE_MAX:
        return f"image.source.base64: image exceeds 5 MB maximum: {len(data)} bytes > {IMAGE_MAX} bytes"
    found = _magic(data)
    if found is not None and found != media_type:
        return f"image.source.base64.data: Image does not match the provided media type {media_type}"
    sides = dimensions(data)
    if sides is not None and max(sides) > (MANY_SIDE_MAX if many else SIDE_MAX):
        return f"{_SIDES} for many-image requests: {MANY_SIDE_MAX} pixels" if many else f"{_SIDES}: {SIDE_MAX} pixels"
    return None


def _magic(data: str) -> str | None:
    """The type of the four whose signature the base64 ``data`` starts with (the fake's own
    reading, apart from the gateway's: a fault shared with it would hide)."""
    try:
        head = base64.b64decode(data[:16] + "=" * (-len(data[:16]) % 4))
    except ValueError:
        return None
    signatures = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
                  (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))  # fmt: skip
    found = next((kind for mark, kind in signatures if head.startswith(mark)), None)
    return found or ("image/webp" if head[:4] == b"RIFF" and head[8:12] == b"WEBP" else None)


def _trailing_whitespace(last: Any) -> str | None:
    # Only the turn the model is to continue: earlier assistant turns may end as they like.
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return None
    blocks = _blocks(last)
    text = blocks[-1].get("text") if blocks and blocks[-1].get("type") == "text" else None
    if isinstance(text, str) and text[-1:].isspace():
        return "messages: final assistant content cannot end with trailing whitespace"
    return None


def _tool_name(tools: Any) -> str | None:
    if not isinstance(tools, list):
        return None
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "custom") not in ("custom", None):
            continue  # a server tool: its name is Anthropic's
        name = tool.get("name")
        if isinstance(name, str) and not _CUSTOM_TOOL_NAME.fullmatch(name):
            return f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
    return None


def _unique_names(tools: Any) -> str | None:
    names = [t.get("name") for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
    named = [n for n in names if isinstance(n, str)]
    if len(set(named)) < len(named):
        return "tools: Tool names must be unique."
    return None


def _input_schema(tools: Any) -> str | None:
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(tool, dict) or tool.get("type", "custom") not in ("custom", None):
            continue
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            continue  # the fake's other checks answer a body of the wrong shape
        if "type" not in schema:
            return f"tools.{i}.custom.input_schema.type: Field required"
        if schema["type"] != "object":
            return f"tools.{i}.custom.input_schema.type: Input should be 'object'"
        if mistyped(schema) is not None or miscounted(schema) is not None:
            return f"tools.{i}.custom.input_schema: {_DRAFT}"
    return None


def _stop_sequences(stops: Any) -> str | None:
    if isinstance(stops, list) and any(isinstance(s, str) and not s.strip() for s in stops):
        return "stop_sequences: each stop sequence must contain non-whitespace"
    return None


def _user_id(metadata: Any) -> str | None:
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user_id, str) and _EMAIL.search(user_id):
        return "metadata.user_id: user_id appears to contain an email address."
    if isinstance(user_id, str) and len(user_id) > 256:
        # The reference's maxLength (docs.anthropic.com/en/api/messages, metadata.user_id);
        # the translations hash a longer id (chat_messages.USER_ID_MAX).
        return "metadata.user_id: String should have at most 256 characters"
    return None


def _thinking(payload: dict[str, Any], thought: Collection[str], interleaved: bool = False) -> str | None:
    thinking = payload.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind == "disabled" and _always_thinks(payload.get("model"), DISABLED_REFUSED):
        return ('"thinking.type.disabled" is not supported for this model. Use "thinking.type.adaptive" '
                'and "output_config.effort" to control thinking behavior.')  # fmt: skip
    choice = payload.get("tool_choice")
    forced = isinstance(choice, dict) and choice.get("type") in ("any", "tool")
    if kind is None and not forced and _always_thinks(payload.get("model"), THINKS_UNASKED):
        return _thought_first(payload.get("messages"), thought)  # adaptive, unasked
    if kind not in ("enabled", "adaptive"):
        return None
    takes = thinking_types(payload.get("model"))
    if takes == frozenset():
        return f"'{payload.get('model')}' does not support thinking."
    if takes is not None and kind not in takes:
        if kind == "enabled":
            return ('"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" '
                    'and "output_config.effort" to control thinking behavior.')  # fmt: skip
        return "adaptive thinking is not supported on this model"
    budget, max_tokens = _enabled_budget(thinking), payload.get("max_tokens")
    if budget is not None and _number(max_tokens) and budget >= max_tokens and not interleaved:
        return f"`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at {_BUDGET_DOCS}"
    return _with_thinking(payload) or _thought_first(payload.get("messages"), thought)


def preserves_thinking(model: Any) -> bool:
    """Whether the model checks a thinking block against what preceded it: Claude Fable 5.1 and
    later, Opus, Sonnet and Haiku 5.5 and later (the preserved-thinking pages' model lists).
    Mythos 5.1 records the binding but does not check it (Bedrock's "Preserved thinking" page)."""
    named = _NAMED.search(model) if isinstance(model, str) else None
    if named is None or not named["major"]:
        return False
    version = (int(named["major"]), int(named["minor"] or 0))
    first = {"fable": (5, 1), "opus": (5, 5), "sonnet": (5, 5), "haiku": (5, 5)}.get(named["family"])
    return first is not None and version >= first


def bound_thinking(step: Any, payload: dict[str, Any]) -> dict[str, str]:
    """The signatures (a redacted block's data) of the thinking a Messages answer (a ``Reply``
    body or a ``Stream``'s events) holds, each with the prefix it is bound to (``prefix``): the
    request's ``system``, ``tools`` and every message, which its turn follows when the client
    sends it back."""
    messages = payload.get("messages")
    bound = prefix(payload, len(messages) if isinstance(messages, list) else 0)
    marks: list[Any] = []
    body = getattr(step, "body", None)
    for b in body.get("content") or [] if isinstance(body, dict) else []:
        if isinstance(b, dict) and b.get("type") in _THOUGHT:
            marks.append(b.get("signature") if b["type"] == "thinking" else b.get("data"))
    for raw in getattr(step, "events", None) or []:
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else ""
        for line in text.splitlines():
            if not line.startswith("data: ") or ("signature_delta" not in line and "redacted_thinking" not in line):
                continue
            try:
                event = json.loads(line[6:])
            except ValueError:
                continue
            delta, block = event.get("delta") or {}, event.get("content_block") or {}
            marks.append(delta.get("signature") or (block.get("data") if block.get("type") == "redacted_thinking"
                                                     else None))  # fmt: skip
    return {m: bound for m in marks if isinstance(m, str) and m}


def prefix(payload: Mapping[str, Any], at: int) -> str:
    """A digest of what a thinking block at ``messages[at]`` is bound to: the top-level ``system``,
    the ``tools`` and the messages before it. Cache breakpoints are not part of it: Claude Code
    moves its own to the newest turn on every request, and the prefix-check pages tell a
    conversation Claude Code keeps that it has nothing to change. A string is read as the one
    text block it stands for."""
    messages = payload.get("messages")
    system = payload.get("system")
    seen = {
        "system": _unmarked([{"type": "text", "text": system}] if isinstance(system, str) else system),
        "tools": _unmarked(payload.get("tools")),
        "messages": [{"role": m.get("role"), "content": _unmarked(_blocks(m))}
                     for m in (messages[:at] if isinstance(messages, list) else []) if isinstance(m, dict)],
    }  # fmt: skip
    return hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _unmarked(value: Any) -> Any:
    """``value`` without any ``cache_control``, at any depth (a tool result's own blocks)."""
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    return value


def _unbound(payload: dict[str, Any], bound: Mapping[str, Collection[str]], betas: str) -> str | None:
    thinking = payload.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, dict) else None
    if isinstance(thinking, dict) and "block_binding" in thinking and BINDING_BETA not in betas:
        return f"thinking.{thinking.get('type')}.block_binding: Extra inputs are not permitted"
    dropped = isinstance(binding, dict) and binding.get("prefix_mismatch_behavior") == "drop_block"
    messages = payload.get("messages")
    if not bound or dropped or not preserves_thinking(payload.get("model")) or not isinstance(messages, list):
        return None
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for j, b in enumerate(_blocks(m)):
            if b.get("type") not in _THOUGHT:
                continue
            mark = b.get("signature") if b["type"] == "thinking" else b.get("data")
            if isinstance(mark, str) and mark in bound and prefix(payload, i) not in bound[mark]:
                return (f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to "
                        "a different conversation. Remove the block, or set "
                        '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".')  # fmt: skip
    return None


def _enabled_budget(thinking: Any) -> int | None:
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    return budget if isinstance(budget, int) and not isinstance(budget, bool) else None


def _budget_floor(thinking: Any) -> str | None:
    budget = _enabled_budget(thinking)
    if budget is not None and budget < 1024:
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    return None


def _removed_samplers(payload: dict[str, Any]) -> str | None:
    if thinking_types(payload.get("model")) != ADAPTIVE:
        return None
    for field in ("temperature", "top_p", "top_k"):
        if payload.get(field) is not None:
            return f"`{field}` is deprecated for this model."
    return None


def _forced_tool(payload: dict[str, Any]) -> str | None:
    choice = payload.get("tool_choice")
    if not isinstance(choice, dict) or choice.get("type") not in ("any", "tool"):
        return None
    return _NOT_FORCED if _always_thinks(payload.get("model")) else None


def _always_thinks(model: Any, since_versions: dict[str, tuple[int, int]] = FORCING_REFUSED) -> bool:
    """Whether the model thinks on every request, and so takes neither a forced tool nor
    thinking turned off (``FORCING_REFUSED``; ``DISABLED_REFUSED`` for thinking turned off)."""
    named = _NAMED.search(model) if isinstance(model, str) else None
    if named is None or not named["major"]:
        return False
    since = since_versions.get(named["family"])
    return since is not None and (int(named["major"]), int(named["minor"] or 0)) >= since


def _samplers(payload: dict[str, Any]) -> str | None:
    if not (_number(payload.get("temperature")) and _number(payload.get("top_p"))):
        return None
    model = payload.get("model")
    named = _NAMED.search(model) if isinstance(model, str) else None
    if named is None or not named["major"] or not named["minor"]:
        return None
    if (named["family"], int(named["major"]), int(named["minor"])) in ONE_SAMPLER:
        return "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
    return None


def thought_calls(step: Any) -> set[str]:
    """The tool_use ids of a Messages answer (a ``Reply`` body or a ``Stream``'s events) that
    also holds a thinking block: the calls Anthropic wants back after their thinking."""
    docs = _answer_blocks(step)
    if not any(b.get("type") in _THOUGHT for b in docs):
        return set()
    return {b["id"] for b in docs if b.get("type") == "tool_use" and isinstance(b.get("id"), str)}


def unthought_calls(step: Any, payload: Mapping[str, Any]) -> set[str]:
    """The tool_use ids of a Messages answer to a request that asked no thinking: the model had
    none to start the turn with, so the loop cannot go on with thinking turned on."""
    thinking = payload.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        return set()
    if thinking is None and _always_thinks(payload.get("model"), THINKS_UNASKED):
        return set()  # asked by default: as a request that asked, not judged
    return answered_calls(step)


def answered_calls(step: Any) -> set[str]:
    """The tool_use ids of a Messages answer."""
    return {b["id"] for b in _answer_blocks(step) if b.get("type") == "tool_use" and isinstance(b.get("id"), str)}


def _answer_blocks(step: Any) -> list[dict[str, Any]]:
    docs: list[Any] = []
    body = getattr(step, "body", None)
    if isinstance(body, dict):
        docs = [b for b in body.get("content") or [] if isinstance(b, dict)]
    for raw in getattr(step, "events", None) or []:
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else ""
        for line in text.splitlines():
            if line.startswith("data: ") and '"content_block_start"' in line:
                try:
                    block = json.loads(line[6:]).get("content_block")
                except (ValueError, AttributeError):
                    continue
                if isinstance(block, dict):
                    docs.append(block)
    return docs


def _thought_first(messages: Any, thought: Collection[str]) -> str | None:
    turns = [(i, m) for i, m in enumerate(messages if isinstance(messages, list) else [])
             if isinstance(m, dict) and m.get("role") == "assistant"]  # fmt: skip
    if not turns:
        return None
    i, last = turns[-1]
    blocks = _blocks(last)
    if not any(b.get("type") == "tool_use" and b.get("id") in thought for b in blocks):
        return None
    if blocks[0].get("type") in _THOUGHT:
        return None
    return (f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            f"`{blocks[0].get('type')}`. When `thinking` is enabled, a final `assistant` message must start "
            "with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
            "recommend you include thinking blocks from previous turns. To avoid this requirement, disable "
            "`thinking`. Please consult our documentation at "
            "https://docs.claude.com/en/docs/build-with-claude/extended-thinking")  # fmt: skip


def _signatures(messages: list[Any], org: str | None = None) -> str | None:
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") != "assistant":
            continue
        for j, b in enumerate(_blocks(m)):
            if b.get("type") != "thinking":
                continue
            signature, thinking = b.get("signature"), b.get("thinking")
            if signature is None:
                return f"messages.{i}.content.{j}.thinking.signature: Field required"
            forged = isinstance(signature, str) and signature.startswith(SIGNATURE_MARK) and (
                signature != sign(thinking if isinstance(thinking, str) else "", org))
            if not isinstance(signature, str) or not signature or forged:
                return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
    return None


def _with_thinking(payload: dict[str, Any]) -> str | None:
    temperature, top_p, choice = payload.get("temperature"), payload.get("top_p"), payload.get("tool_choice")
    if _number(temperature) and temperature != 1:
        return ("`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. "
                "Please consult our documentation at "
                "https://platform.claude.com/docs/en/build-with-claude/extended-thinking")  # fmt: skip
    if _number(top_p) and top_p < 0.95:
        return f"`top_p` must be greater than or equal to 0.95 or unset when thinking is enabled. {_DOCS}"
    if payload.get("top_k") is not None:
        return f"`top_k` must be unset when thinking is enabled. {_DOCS}"
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        return "Thinking may not be enabled when tool_choice forces tool use."
    return None


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _breakpoints(payload: dict[str, Any], messages: list[Any]) -> str | None:
    tools, system = payload.get("tools"), payload.get("system")
    blocks = [*(tools if isinstance(tools, list) else []), *(system if isinstance(system, list) else []),
              *(b for m in messages if isinstance(m, dict) for b in _blocks(m))]  # fmt: skip
    found = sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control") is not None)
    found += payload.get("cache_control") is not None  # automatic caching's breakpoint
    if found > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {found}."
    return None


def _ttl_order(payload: dict[str, Any], messages: list[Any]) -> str | None:
    tools, system = payload.get("tools"), payload.get("system")
    placed = [*((f"tools.{j}", b) for j, b in enumerate(tools if isinstance(tools, list) else [])),
              *((f"system.{j}", b) for j, b in enumerate(system if isinstance(system, list) else [])),
              *((f"messages.{i}.content.{j}", b) for i, m in enumerate(messages) if isinstance(m, dict)
                for j, b in enumerate(_blocks(m)))]  # fmt: skip
    short = False
    for where, block in placed:
        marker = block.get("cache_control") if isinstance(block, dict) else None
        if not isinstance(marker, dict):
            continue
        if marker.get("ttl", "5m") == "5m":
            short = True
        elif marker.get("ttl") == "1h" and short:
            return f"{where}.{_TTL}"
    return None


def _output_schema(payload: dict[str, Any]) -> str | None:
    config = payload.get("output_config")
    formats = {"output_config.format": config.get("format") if isinstance(config, dict) else None,
               "output_format": payload.get("output_format")}  # fmt: skip
    for field, form in formats.items():
        if not isinstance(form, dict) or form.get("type") != "json_schema":
            continue
        wrong = mistyped(form.get("schema"))
        if wrong is not None:
            return (f"{field}.schema: Invalid JSON Schema in output format: {wrong!r} is not valid under any of "
                    "the given schemas")  # fmt: skip
        if any("oneOf" in sub for _, sub in schemas(form.get("schema"))):
            return f"{field}.schema: Schema type 'oneOf' is not supported"
        for _, obj in objects(form.get("schema")):
            if obj.get("additionalProperties") is True:
                return (f"{field}.schema: For 'object' type, 'additionalProperties: true' is not supported. "
                        "Please set 'additionalProperties' to false")  # fmt: skip
            if obj.get("additionalProperties") is not False:
                return (f"{field}.schema: For 'object' type, 'additionalProperties' must be explicitly set "
                        "to false")  # fmt: skip
        unsupported = _unsupported(form.get("schema"))
        if unsupported is not None:
            return f"{field}.schema: {unsupported}"
    return None


def _unsupported(schema: Any) -> str | None:
    """Anthropic's words for the outermost schema with a constraint structured outputs lack."""
    for _, sub in schemas(schema):
        kind = sub.get("type")
        for name in kind if isinstance(kind, list) else [kind]:
            if not isinstance(name, str):
                continue
            found = sorted(k for k in _UNSUPPORTED.get(name, ()) if k in sub)
            if len(found) == 1:
                return f"For '{name}' type, property '{found[0]}' is not supported"
            if found:
                return f"For '{name}' type, properties {', '.join(found)} are not supported"
            if name == "array" and sub.get("minItems", 0) not in (0, 1):
                return "For 'array' type, 'minItems' values other than 0 or 1 are not supported"
    return None


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []
