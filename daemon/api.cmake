# daemon/api.cmake — the front door (HTTP API), included from daemon/CMakeLists.txt.
#
# kvasir_api: routes, OpenAI shapes, the Beast server (Beast only in
# http_server.cpp). No tokenizer: it takes a TextCodec, so its tests use a fake.
# kvasir_api_codec: the TextCodec over model/tokenizer.h (+ chat template).
add_library(kvasir_api STATIC
  ${CMAKE_CURRENT_LIST_DIR}/openai.cpp
  ${CMAKE_CURRENT_LIST_DIR}/openai_stop.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_generate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/http_server.cpp)
find_package(Boost 1.74 REQUIRED COMPONENTS system)
target_link_libraries(kvasir_api PUBLIC kvasir_base nlohmann_json::nlohmann_json fmt::fmt
                      Boost::boost Boost::system Threads::Threads)
if(TARGET kvasir_ipc)
  target_link_libraries(kvasir_api PUBLIC kvasir_ipc)
else()
  target_sources(kvasir_api PRIVATE ${CMAKE_SOURCE_DIR}/ipc/sampling.cpp)
endif()

add_library(kvasir_api_codec STATIC ${CMAKE_CURRENT_LIST_DIR}/api_codec.cpp)
target_link_libraries(kvasir_api_codec PUBLIC kvasir_api kvasir_model)

if(TARGET kvasird)
  target_link_libraries(kvasird PRIVATE kvasir_api kvasir_api_codec)
  # Start-up progress read from the segment (needs kvasir_ipc, like kvasird).
  target_sources(kvasird PRIVATE ${CMAKE_CURRENT_LIST_DIR}/loading.cpp)
endif()
