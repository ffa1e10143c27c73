#include "modelgen/tokenizer_files.h"

#include <nlohmann/json.hpp>

#include "modelgen/presets.h"
#include "modelgen/tiny_corpus.h"
#include "tokenizer/bpe_trainer.h"

namespace glint {

std::string_view GlmChatTemplate() {
  static constexpr std::string_view kTemplate = R"jinja([gMASK]<sop>
{%- set effort = reasoning_effort if (reasoning_effort is defined and reasoning_effort) else 'Max' -%}
<|system|>Reasoning Effort: {{ effort }}
{%- if tools -%}
<|system|>
# Tools

You can call the functions below. Their signatures are inside <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

To call a function, write its name and arguments like this:
<tool_call>function_name<arg_key>argument_name</arg_key><arg_value>argument_value</arg_value></tool_call>
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' -%}
<|system|>{{ message.content }}
{%- elif message.role == 'user' -%}
<|user|>{{ message.content }}
{%- elif message.role == 'assistant' -%}
{%- set reasoning = message.reasoning_content if (message.reasoning_content is defined and message.reasoning_content and not (clear_thinking is defined and clear_thinking)) else '' -%}
<|assistant|><think>{{ reasoning }}</think>{{ message.content if message.content else '' }}
{%- if message.tool_calls is defined and message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- set function = call.function if call.function is defined else call -%}
<tool_call>{{ function.name }}
{%- for key, value in function.arguments.items() -%}
<arg_key>{{ key }}</arg_key><arg_value>{{ value if value is string else value | tojson }}</arg_value>
{%- endfor -%}
</tool_call>
{%- endfor -%}
{%- endif -%}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}<|observation|>{%- endif -%}
<tool_response>{{ message.content }}</tool_response>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|assistant|><think>
{%- if enable_thinking is defined and not enable_thinking -%}</think>{%- endif -%}
{%- endif -%})jinja";
  return kTemplate;
}

Result<TinyTokenizerFiles> MakeTinyTokenizerFiles(int64_t vocab_size) {
  const auto& slots = GlmSpecialTokenSlots();
  BpeTrainerOptions options;
  options.vocab_size = vocab_size - slots.front().offset_from_end;  // ids below <|endoftext|>
  for (const auto& slot : slots) {
    options.special_tokens.push_back(
        {static_cast<int32_t>(vocab_size - slot.offset_from_end), std::string(slot.content), /*special=*/true});
  }
  GLINT_ASSIGN_OR_RETURN(BpeTrainingResult trained, TrainByteLevelBpe(TinyTokenizerCorpus(), options));

  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  nlohmann::ordered_json additional = nlohmann::ordered_json::array();
  for (const auto& token : options.special_tokens) {
    decoder[std::to_string(token.id)] = {{"content", token.content}, {"lstrip", false},      {"normalized", false},
                                         {"rstrip", false},          {"single_word", false}, {"special", true}};
    additional.push_back(token.content);
  }
  nlohmann::ordered_json config = {
      {"added_tokens_decoder", decoder},
      {"additional_special_tokens", additional},
      {"bos_token", nullptr},
      {"eos_token", "<|endoftext|>"},
      {"pad_token", "<|endoftext|>"},
      {"clean_up_tokenization_spaces", false},
      {"do_lower_case", false},
      {"model_max_length", 1048576},
      {"padding_side", "left"},
      {"remove_space", false},
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"chat_template", std::string(GlmChatTemplate())},
  };
  TinyTokenizerFiles files;
  files.tokenizer_json = std::move(trained.tokenizer_json);
  files.tokenizer_config_json = config.dump(2) + "\n";
  files.num_merges = trained.num_merges;
  return files;
}

}  // namespace glint
